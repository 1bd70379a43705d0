// mlaconf tokenizer: loading tokenizer.ggml.*, special-token cutting, byte-level BPE, decoding.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "core/error.h"
#include "core/gguf.h"
#include "tokenizer/utf8.h"

namespace mlaconf::tok {

namespace {

const GgufValue& require_array(const GgufFile& f, const std::string& key, bool strings) {
  const GgufValue& v = f.require(key);
  bool ok = v.is_array() && (strings ? v.elem_type == GgufType::STRING
                                     : (gguf_type_is_integer(v.elem_type) || v.elem_type == GgufType::BOOL));
  if (!ok)
    throw InputError(f.path() + ": metadata key '" + key + "' is " +
                     (v.is_array() ? std::string("an array of ") + gguf_type_name(v.elem_type) : gguf_type_name(v.type)) +
                     ", expected an array of " + (strings ? "strings" : "integers"));
  return v;
}

// Spelling in GPT-2's byte alphabet -> raw bytes. Characters outside the alphabet (a hand-added
// token) stand for their own UTF-8 bytes, as in Hugging Face's ByteLevel decoder.
std::string byte_level_to_bytes(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    size_t len = decode_codepoint(text, i, &cp);
    int b = (cp == 0xFFFD && len == 1) ? -1 : codepoint_to_byte(cp);
    if (b >= 0)
      out.push_back(static_cast<char>(b));
    else
      out.append(text, i, len);
    i += len;
  }
  return out;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  for (char c : bytes) out += byte_to_symbol(static_cast<uint8_t>(c));
  return out;
}

bool renders_raw(TokenType t) { return t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown; }
bool is_special_type(TokenType t) { return t == TokenType::Control || t == TokenType::Unknown; }

}  // namespace

Tokenizer Tokenizer::from_gguf_path(const std::string& path) { return from_gguf(GgufFile::open(path)); }

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  Tokenizer t;
  t.source_ = f.path();
  const std::string& src = t.source_;

  const GgufValue* model = f.find("tokenizer.ggml.model");
  if (!model) throw InputError(src + ": the GGUF carries no tokenizer (metadata key 'tokenizer.ggml.model' is missing)");
  t.model_ = f.get_string("tokenizer.ggml.model");
  if (t.model_ != "gpt2")
    throw InputError(src + ": tokenizer model '" + t.model_ +
                     "' (tokenizer.ggml.model) is not supported; mlaconf supports 'gpt2' (byte-level BPE)");
  // No pre name: llama.cpp falls back to its "default" split; so do we.
  t.pre_name_ = f.find("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : "default";
  t.pretok_ = std::make_unique<PreTokenizer>(PreTokenizer::from_name(t.pre_name_, src));

  const GgufValue& tokens = require_array(f, "tokenizer.ggml.tokens", true);
  const size_t n = tokens.strings.size();
  if (n == 0) throw InputError(src + ": tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX)) throw InputError(src + ": tokenizer.ggml.tokens has too many entries");
  t.tokens_ = tokens.strings;
  t.types_.assign(n, TokenType::Normal);
  if (f.find("tokenizer.ggml.token_type")) {
    const GgufValue& types = require_array(f, "tokenizer.ggml.token_type", false);
    if (types.ints.size() != n)
      throw InputError(src + ": tokenizer.ggml.token_type has " + std::to_string(types.ints.size()) +
                       " entries but tokenizer.ggml.tokens has " + std::to_string(n));
    for (size_t i = 0; i < n; ++i) {
      int64_t ty = types.ints[i];
      if (ty < 0 || ty > 6)
        throw InputError(src + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(ty) +
                         " is not a token type (0..6)");
      t.types_[i] = static_cast<TokenType>(ty);
    }
  }

  t.index_.reserve(n * 2);
  t.bytes_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& s = t.tokens_[i];
    if (s.empty()) throw InputError(src + ": tokenizer.ggml.tokens[" + std::to_string(i) + "] is empty");
    auto [it, fresh] = t.index_.emplace(s, static_cast<int32_t>(i));
    if (!fresh)
      throw InputError(src + ": tokenizer.ggml.tokens has '" + s + "' twice (ids " + std::to_string(it->second) +
                       " and " + std::to_string(i) + ")");
    t.bytes_[i] = renders_raw(t.types_[i]) ? s : byte_level_to_bytes(s);
  }

  for (int b = 0; b < 256; ++b) {
    int32_t id = t.find_token(byte_to_symbol(static_cast<uint8_t>(b)));
    if (id < 0 || renders_raw(t.types_[id])) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw InputError(src + ": tokenizer.ggml.tokens has no token for byte " + hex + " ('" +
                       byte_to_symbol(static_cast<uint8_t>(b)) + "'): not a complete byte-level BPE vocabulary");
    }
    t.byte_token_[b] = id;
  }

  const GgufValue& merges = require_array(f, "tokenizer.ggml.merges", true);
  t.merges_.reserve(merges.strings.size());
  t.merge_rank_.reserve(merges.strings.size() * 2);
  for (size_t r = 0; r < merges.strings.size(); ++r) {
    const std::string& m = merges.strings[r];
    size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    auto where = [&] { return src + ": tokenizer.ggml.merges[" + std::to_string(r) + "] '" + m + "'"; };
    if (sp == std::string::npos || sp + 1 >= m.size()) throw InputError(where() + " is not of the form 'left right'");
    std::string l = m.substr(0, sp), rr = m.substr(sp + 1);
    int32_t li = t.find_token(l), ri = t.find_token(rr), res = t.find_token(l + rr);
    if (li < 0) throw InputError(where() + ": '" + l + "' is not a token");
    if (ri < 0) throw InputError(where() + ": '" + rr + "' is not a token");
    if (res < 0) throw InputError(where() + ": the merged token '" + l + rr + "' is not in the vocabulary");
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(li)) << 32) | static_cast<uint32_t>(ri);
    t.merge_rank_.emplace(key, static_cast<int32_t>(t.merges_.size()));  // a repeated pair keeps its first rank
    t.merges_.push_back({li, ri, res});
  }

  auto special_id = [&](const char* key) -> int32_t {
    if (!f.find(key)) return -1;
    int64_t id = f.get_int(key);
    if (id < 0 || id >= static_cast<int64_t>(n))
      throw InputError(src + ": " + key + " = " + std::to_string(id) + " is outside the vocabulary (" +
                       std::to_string(n) + " tokens)");
    return static_cast<int32_t>(id);
  };
  t.bos_ = special_id("tokenizer.ggml.bos_token_id");
  t.eos_ = special_id("tokenizer.ggml.eos_token_id");
  t.eot_ = special_id("tokenizer.ggml.eot_token_id");
  t.eom_ = special_id("tokenizer.ggml.eom_token_id");
  t.pad_ = special_id("tokenizer.ggml.padding_token_id");
  t.unk_ = special_id("tokenizer.ggml.unknown_token_id");
  t.add_bos_ = f.find("tokenizer.ggml.add_bos_token") ? f.get_bool("tokenizer.ggml.add_bos_token") : false;

  for (size_t i = 0; i < n; ++i) {
    TokenType ty = t.types_[i];
    if (ty == TokenType::Control || ty == TokenType::UserDefined)
      t.specials_.push_back({t.tokens_[i], static_cast<int32_t>(i), ty == TokenType::Control});
  }
  std::stable_sort(t.specials_.begin(), t.specials_.end(),
                   [](const Special& a, const Special& b) { return a.text.size() > b.text.size(); });
  for (size_t k = 0; k < t.specials_.size(); ++k)
    t.specials_by_first_[static_cast<uint8_t>(t.specials_[k].text[0])].push_back(k);
  return t;
}

int32_t Tokenizer::find_token(std::string_view text) const {
  auto it = index_.find(std::string(text));
  return it == index_.end() ? -1 : it->second;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  (void)token_bytes(id);  // range check
  return tokens_[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  (void)token_bytes(id);
  return types_[id];
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= n_vocab())
    throw InputError(source_ + ": token id " + std::to_string(id) + " is outside the vocabulary (" +
                     std::to_string(n_vocab()) + " tokens)");
  return bytes_[id];
}

std::string Tokenizer::token_bytes(int32_t id, const DecodeOptions& opt) const {
  const std::string& b = token_bytes(id);
  if (!opt.special && is_special_type(types_[id])) return {};
  return b;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& opt) const {
  std::string raw;
  for (int32_t id : ids) {
    const std::string& b = token_bytes(id);
    if (!opt.special && is_special_type(types_[id])) continue;
    raw += b;
  }
  return sanitize_utf8(raw);
}

void Tokenizer::bpe_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (pretok_->ignore_merges()) {
    int32_t whole = find_token(bytes_to_byte_level(piece));
    if (whole >= 0 && !renders_raw(types_[whole])) {
      out.push_back(whole);
      return;
    }
  }
  const int n = static_cast<int>(piece.size());
  std::vector<int32_t> id(n);
  std::vector<int> prev(n), next(n);
  std::vector<char> alive(n, 1);
  for (int i = 0; i < n; ++i) {
    id[i] = byte_token_[static_cast<uint8_t>(piece[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // Candidate merges ordered by (rank, left position): among equal ranks the leftmost goes first.
  struct Cand {
    int32_t rank;
    int left, right;
    int32_t lid, rid;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  auto consider = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(id[l])) << 32) | static_cast<uint32_t>(id[r]);
    auto it = merge_rank_.find(key);
    if (it != merge_rank_.end()) q.push({it->second, l, r, id[l], id[r]});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i, i + 1);
  while (!q.empty()) {
    Cand c = q.top();
    q.pop();
    // Stale: one side has since merged with something else.
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || id[c.left] != c.lid || id[c.right] != c.rid)
      continue;
    id[c.left] = merges_[c.rank].result;
    alive[c.right] = 0;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    consider(prev[c.left], c.left);
    consider(c.left, next[c.left]);
  }
  for (int i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& opt) const {
  std::vector<int32_t> out;
  if (opt.add_bos) {
    if (bos_ < 0) throw InputError(source_ + ": cannot add bos: the model names no tokenizer.ggml.bos_token_id");
    out.push_back(bos_);
  }
  std::string clean = is_valid_utf8(text) ? std::string(text) : sanitize_utf8(text);
  auto encode_segment = [&](std::string_view seg) {
    for (std::string_view piece : pretok_->split(seg)) bpe_piece(piece, out);
  };
  size_t seg_start = 0;
  for (size_t i = 0; i < clean.size();) {
    const Special* hit = nullptr;
    for (size_t k : specials_by_first_[static_cast<uint8_t>(clean[i])]) {
      const Special& s = specials_[k];
      if (!s.control || opt.parse_special) {
        if (clean.compare(i, s.text.size(), s.text) == 0) {
          hit = &s;  // longest first: the first hit is the longest here
          break;
        }
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    encode_segment(std::string_view(clean).substr(seg_start, i - seg_start));
    out.push_back(hit->id);
    i += hit->text.size();
    seg_start = i;
  }
  encode_segment(std::string_view(clean).substr(seg_start));
  return out;
}

}  // namespace mlaconf::tok
