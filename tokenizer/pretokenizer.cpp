// mlaconf tokenizer: tokenizer.ggml.pre -> split regexes, run with PCRE2.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <map>
#include <stdexcept>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace mlaconf::tok {

namespace {

struct PreSpec {
  std::vector<std::string> regexes;
  bool ignore_merges = false;
};

// Names grouped as llama.cpp's llama_vocab::load groups them.
const std::map<std::string, PreSpec>& pre_table() {
  // Built on first use, not at static-initialization time (tests register cases from the table).
  static const std::map<std::string, PreSpec> t = [] {
    // The split patterns, as the models' tokenizer.json files spell them (llama.cpp carries the same
    // lists, some with the (?i:...) group unrolled for std::regex).
    const char* const kContractionsCi = R"((?i:'s|'t|'re|'ve|'m|'ll|'d))";
    const std::string kLlama3 = std::string(kContractionsCi) +
        R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    const std::string kQwen2 = std::string(kContractionsCi) +
        R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
    const std::string kGpt4o =
        R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
        R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
        R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    const std::string kTekken =
        R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
        R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
        R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    const std::string kDeepseek3Words =
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
        R"(| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    std::map<std::string, PreSpec> m;
    auto add = [&](std::initializer_list<const char*> names, PreSpec spec) {
      for (const char* n : names) m[n] = spec;
    };
    add({"glm4", "chatglm-bpe", "dbrx", "smaug-bpe"}, {{kLlama3}, false});
    add({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"}, {{kLlama3}, true});
    add({"qwen2", "deepseek-r1-qwen", "kormo", "stablelm2", "megrez", "hunyuan", "grok-2"}, {{kQwen2}, false});
    add({"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
         "jina-v1-en", "jina-v2-code", "roberta-bpe", "exaone4", "mpt", "olmo", "jais", "trillion", "granite-docling"},
        {{kGpt2}, false});
    add({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, {{R"(\p{N})", kGpt2}, false});
    add({"falcon"}, {{R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}, false});
    add({"gpt-4o", "llama4", "minimax-m2"}, {{kGpt4o}, false});
    add({"tekken"}, {{kTekken}, true});
    add({"deepseek-v3", "hunyuan-dense"},
        {{R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)", kDeepseek3Words}, false});
    add({"default"}, {{R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}, false});
    return m;
  }();
  return t;
}

// Unicode White_Space, as a character-class body.
constexpr const char* kWhiteSpaceBody = R"(\t\n\x0B\f\r\x{85}\p{Z})";

}  // namespace

std::string rewrite_whitespace_classes(const std::string& r) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < r.size(); ++i) {
    char c = r[i];
    if (c == '\\' && i + 1 < r.size()) {
      char d = r[i + 1];
      if (d == 's') {
        out += in_class ? std::string(kWhiteSpaceBody) : "[" + std::string(kWhiteSpaceBody) + "]";
      } else if (d == 'S') {
        if (in_class) throw std::logic_error("pre-tokenizer regex: \\S inside a class is not supported: " + r);
        out += "[^" + std::string(kWhiteSpaceBody) + "]";
      } else {
        out += c;
        out += d;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A leading '^' and a leading ']' belong to the class, not its end.
      if (i + 1 < r.size() && r[i + 1] == '^') out += r[++i];
      if (i + 1 < r.size() && r[i + 1] == ']') out += r[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() {
    if (code) pcre2_code_free(code);
  }
};

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::supported_names() {
  std::vector<std::string> v;
  for (const auto& [k, _] : pre_table()) v.push_back(k);
  return v;
}

PreTokenizer PreTokenizer::from_name(const std::string& pre, const std::string& source) {
  auto it = pre_table().find(pre);
  if (it == pre_table().end()) {
    std::string names;
    for (const auto& n : supported_names()) names += (names.empty() ? "" : ", ") + n;
    throw InputError((source.empty() ? "" : source + ": ") + "unsupported tokenizer.ggml.pre '" + pre +
                     "' (no split regex known for it); supported: " + names);
  }
  PreTokenizer p = from_regexes(it->second.regexes, pre);
  p.ignore_merges_ = it->second.ignore_merges;
  return p;
}

PreTokenizer PreTokenizer::from_regexes(std::vector<std::string> regexes, std::string name) {
  PreTokenizer p;
  p.name_ = std::move(name);
  for (const auto& r : regexes) {
    std::string pattern = rewrite_whitespace_classes(r);
    int err = 0;
    PCRE2_SIZE off = 0;
    auto c = std::make_unique<Compiled>();
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                            &off, nullptr);
    if (!c->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw InputError("pre-tokenizer '" + p.name_ + "': regex does not compile at offset " + std::to_string(off) +
                       ": " + reinterpret_cast<const char*>(msg) + ": " + r);
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is the fallback
    p.compiled_.push_back(std::move(c));
  }
  p.regexes_ = std::move(regexes);
  return p;
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  for (const auto& c : compiled_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(c->code, nullptr);
    if (!md) throw std::bad_alloc();
    std::vector<std::string_view> next;
    for (std::string_view frag : pieces) {
      auto subject = reinterpret_cast<PCRE2_SPTR>(frag.data());
      size_t start = 0, pos = 0;
      while (pos < frag.size()) {
        int rc = pcre2_match(c->code, subject, frag.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          pcre2_match_data_free(md);
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof msg);
          throw InputError("pre-tokenizer '" + name_ + "': regex match failed: " + reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {  // an empty match splits nothing: step over one character
          uint32_t cp;
          pos = ms + decode_codepoint(frag, ms, &cp);
          continue;
        }
        if (ms > start) next.push_back(frag.substr(start, ms - start));
        next.push_back(frag.substr(ms, me - ms));
        start = pos = me;
      }
      if (start < frag.size()) next.push_back(frag.substr(start));
    }
    pcre2_match_data_free(md);
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace mlaconf::tok
