// mlaconf tokenizer: the pre-tokenizer, the regex split that runs before BPE, chosen by
// tokenizer.ggml.pre as llama.cpp does (llama-vocab.cpp maps the name to a list of regexes).
//
// Each regex of the list splits every piece from the previous one into its matches and the gaps
// between them, all kept in order (Hugging Face's Split(behavior="isolated"); llama.cpp's
// unicode_regex_split). So the pieces always concatenate back to the input.
//
// Regexes run on PCRE2 (UTF + UCP). \s and \S are rewritten to Unicode White_Space
// ([\t\n\v\f\r\x85\p{Z}]), which is what Oniguruma / Rust regex (Hugging Face) and Python's regex module
// mean by \s; PCRE2's own \s would also take U+180E. The (?i:'s|...) contraction group of the
// llama-3 pattern is kept as Hugging Face's tokenizer.json spells it.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mlaconf::tok {

class PreTokenizer {
 public:
  // Throws InputError ("unsupported tokenizer.ggml.pre 'x'; supported: ...") for an unknown name.
  // `source` names the file for messages.
  static PreTokenizer from_name(const std::string& pre, const std::string& source = "");
  // An explicit regex list (tests, cross-checks); throws InputError if one does not compile.
  static PreTokenizer from_regexes(std::vector<std::string> regexes, std::string name = "custom");

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Splits well-formed UTF-8 text (callers sanitize first) into pieces that concatenate to it.
  std::vector<std::string_view> split(std::string_view text) const;

  const std::string& name() const { return name_; }
  const std::vector<std::string>& regexes() const { return regexes_; }  // as written, before rewriting
  // Whether whole pieces found in the vocabulary skip BPE (llama.cpp's ignore_merges: llama-3 names).
  bool ignore_merges() const { return ignore_merges_; }

  // Every name from_name accepts.
  static std::vector<std::string> supported_names();

 private:
  PreTokenizer() = default;
  struct Compiled;
  std::string name_;
  std::vector<std::string> regexes_;
  std::vector<std::unique_ptr<Compiled>> compiled_;
  bool ignore_merges_ = false;
};

// The rewrite described above; exposed for tests.
std::string rewrite_whitespace_classes(const std::string& regex);

}  // namespace mlaconf::tok
