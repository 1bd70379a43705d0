// The pre-tokenizer table: every tokenizer.ggml.pre name compiles and splits losslessly; a few
// known splits pin the table to the right regexes (digits in threes for glm4/llama3, one by one for
// qwen2, in one run for gpt-2); the \s rewrite to Unicode White_Space.
#include "corpus.h"
#include "core/error.h"
#include "tok_test_util.h"
#include "tokenizer/pretokenizer.h"

namespace {

using mlaconf::tok::PreTokenizer;

std::vector<std::string> pieces(const PreTokenizer& p, const std::string& s) {
  std::vector<std::string> v;
  for (auto x : p.split(s)) v.emplace_back(x);
  return v;
}

void check_lossless(const std::string& name) {
  PreTokenizer p = PreTokenizer::from_name(name);
  for (const auto& e : tokt::awkward_corpus()) {
    std::string joined;
    for (auto x : p.split(e.text)) {
      EXPECT_FALSE(x.empty()) << name << " " << e.name;
      joined += x;
    }
    EXPECT_EQ(joined, e.text) << name << " " << e.name;
  }
}

void check_known_splits() {
  using V = std::vector<std::string>;
  PreTokenizer glm4 = PreTokenizer::from_name("glm4");
  EXPECT_EQ(pieces(glm4, "In 12345 days I'll go"), (V{"In", " ", "123", "45", " days", " I", "'ll", " go"}));
  EXPECT_EQ(pieces(glm4, "hello  world\n\n  x"), (V{"hello", " ", " world", "\n\n", " ", " x"}));
  EXPECT_EQ(pieces(glm4, "(word) ...!"), (V{"(word", ")", " ...!"}));
  EXPECT_EQ(pieces(glm4, "DON'T"), (V{"DON", "'T"}));
  EXPECT_FALSE(glm4.ignore_merges());
  PreTokenizer qwen = PreTokenizer::from_name("qwen2");
  EXPECT_EQ(pieces(qwen, "x 123"), (V{"x", " ", "1", "2", "3"}));
  PreTokenizer gpt2 = PreTokenizer::from_name("gpt-2");
  EXPECT_EQ(pieces(gpt2, "x 12345 (word)"), (V{"x", " 12345", " (", "word", ")"}));
  PreTokenizer llama3 = PreTokenizer::from_name("llama-bpe");
  EXPECT_TRUE(llama3.ignore_merges());
  EXPECT_EQ(pieces(llama3, "In 12345"), (V{"In", " ", "123", "45"}));
  PreTokenizer ds3 = PreTokenizer::from_name("deepseek-v3");
  EXPECT_EQ(pieces(ds3, "ab1234\xE4\xBD\xA0\xE5\xA5\xBD"), (V{"ab", "123", "4", "\xE4\xBD\xA0\xE5\xA5\xBD"}));
  // U+180E (Mongolian vowel separator) is not White_Space since Unicode 6.3: PCRE2's own \s would
  // take it; the rewritten class must not. U+0085 (NEL) is White_Space.
  EXPECT_EQ(pieces(glm4, "a\xE1\xA0\x8E" "b"), (V{"a", "\xE1\xA0\x8E" "b"}));
  EXPECT_EQ(pieces(glm4, "a\xC2\x85" "b"), (V{"a", "\xC2\x85" "b"}));
}

void check_rewrite() {
  using mlaconf::tok::rewrite_whitespace_classes;
  EXPECT_EQ(rewrite_whitespace_classes(R"(\s+(?!\S))"),
            R"([\t\n\x0B\f\r\x{85}\p{Z}]+(?![^\t\n\x0B\f\r\x{85}\p{Z}]))");
  EXPECT_EQ(rewrite_whitespace_classes(R"([^\s\p{L}]|\\s)"), R"([^\t\n\x0B\f\r\x{85}\p{Z}\p{L}]|\\s)");
  EXPECT_EQ(rewrite_whitespace_classes(R"([]\s])"), R"([]\t\n\x0B\f\r\x{85}\p{Z}])");
}

void check_unknown() {
  try {
    PreTokenizer::from_name("glm5-imaginary", "model.gguf");
    FAIL() << "accepted an unknown pre";
  } catch (const mlaconf::InputError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("model.gguf: unsupported tokenizer.ggml.pre 'glm5-imaginary'"), std::string::npos) << m;
    EXPECT_NE(m.find("glm4"), std::string::npos) << "the message lists the supported names";
  }
  EXPECT_THROW(PreTokenizer::from_regexes({"(unclosed"}), mlaconf::InputError);
}

const bool registered = [] {
  for (const std::string& n : PreTokenizer::supported_names())
    tokt::register_case("PreTokenizer", "pretokenizer_lossless(pre=" + n + ")", [n] { check_lossless(n); });
  tokt::register_case("PreTokenizer", "pretokenizer_known_splits()", check_known_splits);
  tokt::register_case("PreTokenizer", "pretokenizer_whitespace_rewrite()", check_rewrite);
  tokt::register_case("PreTokenizer", "pretokenizer_error(pre=unknown)", check_unknown);
  return true;
}();

}  // namespace
