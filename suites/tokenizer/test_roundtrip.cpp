// decode(encode(s)) == s on the awkward corpus, for the tiny model's tokenizer and a synthesized one,
// with and without special-token parsing; special tokens in text become exactly their ids.
#include <algorithm>
#include <random>

#include "corpus.h"
#include "tok_test_util.h"
#include "tokenizer/utf8.h"

namespace {

using mlaconf::tok::EncodeOptions;
using mlaconf::tok::Tokenizer;
using mlaconf::tok::TokenType;

const Tokenizer* get(const std::string& which) {
  if (which == "glm_dsa_tiny") return tokt::tiny_tokenizer();
  return &tokt::synthetic_tokenizer(std::stoll(which.substr(std::string("synthetic-").size())));
}

void check_roundtrip(const std::string& which, const tokt::CorpusEntry& e, bool parse_special) {
  const Tokenizer* t = get(which);
  if (!t) GTEST_SKIP() << "skipped: " << tokt::tiny_gguf_path() << " not found (../shared absent)";
  std::vector<int32_t> ids = t->encode(e.text, {.parse_special = parse_special});
  if (!e.text.empty()) {
    ASSERT_FALSE(ids.empty());
  }
  for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t->n_vocab()) << id;
  std::string back = t->decode(ids);
  EXPECT_EQ(back, e.text) << "ids " << tokt::ids_string(ids) << "\nin  " << tokt::escaped(e.text) << "\nout "
                          << tokt::escaped(back);
  // Control tokens appear exactly where the text spells one (and parsing is on).
  bool has_control = false;
  for (int32_t id : ids) has_control |= t->token_type(id) == TokenType::Control;
  bool spells_special = e.text.find("<|user|>") != std::string::npos || e.text.find("[gMASK]") != std::string::npos ||
                        e.text.find("<|endoftext|>") != std::string::npos;
  EXPECT_EQ(has_control, parse_special && spells_special) << tokt::ids_string(ids);
  // No byte is lost or invented: the token bytes concatenate to the text itself.
  std::string raw;
  for (int32_t id : ids) raw += t->token_bytes(id);
  EXPECT_EQ(raw, e.text);
}

void check_specials_tiny() {
  const Tokenizer* t = tokt::tiny_tokenizer();
  if (!t) GTEST_SKIP() << "skipped: ../shared absent";
  // The tiny model's GLM specials, by id (last 10 of the vocabulary).
  const char* names[10] = {"<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>",
                           "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"};
  for (int k = 0; k < 10; ++k) {
    int32_t id = t->n_vocab() - 10 + k;
    EXPECT_EQ(t->token_text(id), names[k]);
    EXPECT_EQ(t->encode(names[k]), std::vector<int32_t>{id}) << names[k];
    EXPECT_NE(t->encode(names[k], {.parse_special = false}), std::vector<int32_t>{id}) << names[k];
    EXPECT_EQ(t->decode(std::vector<int32_t>{id}), names[k]);
    EXPECT_EQ(t->decode(std::vector<int32_t>{id}, {.special = false}), "");
  }
  EXPECT_EQ(t->bos_id(), 2040);
  EXPECT_EQ(t->eos_id(), 2038);
  EXPECT_EQ(t->eot_id(), 2045);
  EXPECT_EQ(t->eom_id(), 2047);
  EXPECT_EQ(t->pad_id(), 2038);
  EXPECT_FALSE(t->add_bos_default());
  EXPECT_TRUE(t->is_end_of_generation(2038));
  EXPECT_FALSE(t->is_end_of_generation(2040));
  EXPECT_EQ(t->pre(), "glm4");
  // A special token glued between words splits them: "a<|user|>b" = enc("a") + [2045] + enc("b").
  std::vector<int32_t> a = t->encode("hello"), b = t->encode(" world");
  std::vector<int32_t> want = a;
  want.push_back(2045);
  want.insert(want.end(), b.begin(), b.end());
  EXPECT_EQ(t->encode("hello<|user|> world"), want);
  // Leftmost-longest: "[gMASK]" is not cut as "[" + "MASK]"-something; "<|user|>" inside "<<|user|>>".
  std::vector<int32_t> ids = t->encode("<<|user|>>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2045), 1);
  EXPECT_EQ(t->decode(ids), "<<|user|>>");
}

// Invalid UTF-8 in the input: encoded as the U+FFFD repair of it (tokenizer/utf8.h policy).
void check_invalid_input_tiny() {
  const Tokenizer* t = tokt::tiny_tokenizer();
  if (!t) GTEST_SKIP() << "skipped: ../shared absent";
  struct Case {
    std::string in, repaired;
  };
  const std::string R = "\xEF\xBF\xBD";
  std::vector<Case> cases = {
      {"abc\xFF" "def", "abc" + R + "def"},
      {"\xC0\xAF x", R + R + " x"},
      {"tail \xF0\x9F\x98", "tail " + R},
      {"\xED\xA0\x80 surrogate", R + R + R + " surrogate"},
      {"\xE1\x80" "A", R + "A"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(t->encode(c.in), t->encode(c.repaired)) << tokt::escaped(c.in);
    EXPECT_EQ(t->decode(t->encode(c.in)), c.repaired) << tokt::escaped(c.in);
  }
}

// Arbitrary bytes never crash encode, and come back as their U+FFFD repair.
void check_random_bytes() {
  const Tokenizer& t = tokt::synthetic_tokenizer(2048);
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 40);
  for (int rep = 0; rep < 1000; ++rep) {
    std::string s;
    for (int k = len(rng); k > 0; --k) s.push_back(static_cast<char>(byte(rng)));
    std::vector<int32_t> ids = t.encode(s);
    ASSERT_EQ(t.decode(ids), mlaconf::tok::sanitize_utf8(s)) << tokt::escaped(s);
  }
}

const bool registered = [] {
  for (const char* which : {"glm_dsa_tiny", "synthetic_2048"}) {
    for (const auto& e : tokt::awkward_corpus()) {
      tokt::register_case("TokenizerRoundTrip", std::string("roundtrip(tokenizer=") + which + ",text=" + e.name + ")",
                          [which, e] { check_roundtrip(which, e, true); });
      if (e.name.rfind("special", 0) == 0)
        tokt::register_case("TokenizerRoundTrip",
                            std::string("roundtrip(tokenizer=") + which + ",text=" + e.name + ",parse_special=0)",
                            [which, e] { check_roundtrip(which, e, false); });
    }
  }
  tokt::register_case("TokenizerRoundTrip", "special_tokens(tokenizer=glm_dsa_tiny)", check_specials_tiny);
  tokt::register_case("TokenizerRoundTrip", "invalid_utf8_input(tokenizer=glm_dsa_tiny)", check_invalid_input_tiny);
  tokt::register_case("TokenizerRoundTrip", "random_bytes(tokenizer=synthetic_2048,seed=99,n=1000)", check_random_bytes);
  return true;
}();

}  // namespace
