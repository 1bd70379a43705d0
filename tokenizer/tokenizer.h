// mlaconf tokenizer: byte-level BPE (tokenizer.ggml.model "gpt2") read from a GGUF's metadata.
//
// encode(text):
//   1. invalid UTF-8 in `text` is replaced by U+FFFD per maximal subpart (tokenizer/utf8.h);
//   2. special tokens are cut out whole, leftmost-longest (as Hugging Face's added-token matcher):
//      user-defined tokens (token_type 4) always, control tokens (token_type 3) when parse_special;
//   3. each remaining segment is split by the pre-tokenizer regexes of tokenizer.ggml.pre;
//   4. each piece is spelled in GPT-2's byte alphabet and merged by BPE: repeatedly the adjacent pair
//      with the lowest merge rank, leftmost first among equal ranks (llama.cpp and HF agree on this).
// decode(ids): normal tokens map back through the byte alphabet; control and user-defined tokens
//   are their raw text (control tokens dropped when !special); the bytes are then repaired to valid
//   UTF-8 by the same U+FFFD policy, so decode is Hugging Face's decode(skip_special_tokens=!special).
// Round trip: decode(encode(s)) == s for well-formed s (special tokens inside s included).
//
// Every defect of the metadata (missing keys, wrong types, unknown model or pre, merges naming
// tokens that do not exist, ids outside the vocabulary, duplicate tokens, missing byte tokens) is an
// InputError naming the file and the key.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"

namespace mlaconf {
class GgufFile;
}

namespace mlaconf::tok {

// tokenizer.ggml.token_type values (llama.h llama_token_type).
enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct EncodeOptions {
  bool add_bos = false;        // prepend tokenizer.ggml.bos_token_id (InputError if the model has none)
  bool parse_special = true;   // match control tokens in the text (HF always does; llama.cpp's parse_special)
};

struct DecodeOptions {
  bool special = true;  // render control tokens as their text; false drops them (HF skip_special_tokens)
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from an open GGUF.
  static Tokenizer from_gguf(const GgufFile& f);
  static Tokenizer from_gguf_path(const std::string& path);

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt = {}) const;
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& opt = {}) const;

  // The raw bytes a token stands for (a byte-level token may be part of a UTF-8 character);
  // empty for a control token when !special. InputError for an id outside the vocabulary.
  const std::string& token_bytes(int32_t id) const;
  std::string token_bytes(int32_t id, const DecodeOptions& opt) const;
  // The token's spelling in the vocabulary (GPT-2 alphabet for normal tokens: "Ġthe").
  const std::string& token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // The id of a vocabulary entry spelled exactly `text`, or -1.
  int32_t find_token(std::string_view text) const;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  size_t n_merges() const { return merges_.size(); }
  // -1 where the GGUF names none.
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t eot_id() const { return eot_; }
  int32_t eom_id() const { return eom_; }
  int32_t pad_id() const { return pad_; }
  int32_t unk_id() const { return unk_; }
  bool add_bos_default() const { return add_bos_; }  // tokenizer.ggml.add_bos_token (false if absent)
  // True for eos, eot and eom: where generation stops.
  bool is_end_of_generation(int32_t id) const { return id >= 0 && (id == eos_ || id == eot_ || id == eom_); }

  const std::string& model() const { return model_; }     // "gpt2"
  const std::string& pre() const { return pre_name_; }    // e.g. "glm4"
  const PreTokenizer& pretokenizer() const { return *pretok_; }
  const std::string& source() const { return source_; }

  // BPE of one pre-tokenized piece (raw UTF-8 bytes), appended to out. Exposed for tests.
  void bpe_piece(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  Tokenizer() = default;
  struct Merge {
    int32_t left, right, result;
  };
  std::string source_;
  std::string model_, pre_name_;
  std::unique_ptr<PreTokenizer> pretok_;
  std::vector<std::string> tokens_;      // [n_vocab] spellings
  std::vector<TokenType> types_;         // [n_vocab]
  std::vector<std::string> bytes_;       // [n_vocab] decoded bytes
  std::unordered_map<std::string, int32_t> index_;
  std::vector<Merge> merges_;            // rank order
  std::unordered_map<uint64_t, int32_t> merge_rank_;  // (left << 32 | right) -> rank
  std::array<int32_t, 256> byte_token_{};              // byte -> id of its single-byte token
  struct Special {
    std::string text;
    int32_t id;
    bool control;
  };
  std::vector<Special> specials_;        // control and user-defined, longest first
  std::array<std::vector<size_t>, 256> specials_by_first_;  // first byte -> indices into specials_
  int32_t bos_ = -1, eos_ = -1, eot_ = -1, eom_ = -1, pad_ = -1, unk_ = -1;
  bool add_bos_ = false;
};

}  // namespace mlaconf::tok
