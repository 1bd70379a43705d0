// add_synthetic_tokenizer(): exactly n_vocab tokens, deterministic, GLM specials at the end with the
// tiny model's ids layout, common English words as single tokens, and text round-trips.
#include "core/gguf_writer.h"
#include "corpus.h"
#include "tok_test_util.h"
#include "tokenizer/synthetic_vocab.h"

namespace {

using mlaconf::tok::Tokenizer;
using mlaconf::tok::TokenType;

void check_layout(int64_t n) {
  const Tokenizer& t = tokt::synthetic_tokenizer(n);
  ASSERT_EQ(t.n_vocab(), n);
  EXPECT_EQ(t.model(), "gpt2");
  EXPECT_EQ(t.pre(), "glm4");
  EXPECT_FALSE(t.add_bos_default());
  const char* names[10] = {"<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>",
                           "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"};
  for (int k = 0; k < 10; ++k) {
    EXPECT_EQ(t.token_text(static_cast<int32_t>(n - 10 + k)), names[k]);
    EXPECT_EQ(t.token_type(static_cast<int32_t>(n - 10 + k)), TokenType::Control);
  }
  EXPECT_EQ(t.eos_id(), n - 10);
  EXPECT_EQ(t.bos_id(), n - 8);
  EXPECT_EQ(t.eot_id(), n - 3);
  EXPECT_EQ(t.eom_id(), n - 1);
  EXPECT_EQ(t.pad_id(), n - 10);
  EXPECT_EQ(t.unk_id(), n - 10);
  // Merges: as many as regular tokens beyond the bytes when the text has enough to teach.
  EXPECT_GE(t.n_merges(), std::min<size_t>(static_cast<size_t>(n - 266), 1000));
  for (const char* s : {"The lighthouse keeper said: \"It's 1987!\"\n", "snow \xE2\x9D\x84\xEF\xB8\x8F, \xE4\xBD\xA0\xE5\xA5\xBD", "<|user|>hi<|assistant|>"}) {
    std::vector<int32_t> ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s) << tokt::ids_string(ids);
  }
}

void check_deterministic() {
  mlaconf::GgufWriter a, b;
  mlaconf::tok::add_synthetic_tokenizer(a, 2048);
  mlaconf::tok::add_synthetic_tokenizer(b, 2048);
  EXPECT_EQ(a.bytes(), b.bytes());
  mlaconf::GgufWriter c;
  mlaconf::tok::add_synthetic_tokenizer(c, 2049);
  EXPECT_NE(a.bytes(), c.bytes());  // negative control: the comparison can see a difference
}

void check_common_words() {
  const Tokenizer& t = tokt::synthetic_tokenizer(2048);
  for (const char* w : {" the", " and", " of", " to", "The", " was", " keeper", " light", " every", " children"}) {
    std::vector<int32_t> ids = t.encode(w);
    EXPECT_EQ(ids.size(), 1u) << "'" << w << "' -> " << tokt::ids_string(ids);
  }
  // English prose compresses (chars per token), an unseen word still encodes (in pieces).
  std::string prose = "The children of the town liked to visit the lighthouse after school, and the keeper answered every question.";
  double cpt = static_cast<double>(prose.size()) / static_cast<double>(t.encode(prose).size());
  EXPECT_GT(cpt, 3.0) << "chars per token";
  EXPECT_GT(t.encode(" xylophone").size(), 1u);
}

void check_byte_tokens_match_tiny() {
  const Tokenizer* tiny = tokt::tiny_tokenizer();
  if (!tiny) GTEST_SKIP() << "skipped: ../shared absent";
  const Tokenizer& t = tokt::synthetic_tokenizer(2048);
  for (int32_t i = 0; i < 256; ++i) EXPECT_EQ(t.token_text(i), tiny->token_text(i)) << i;
  for (int32_t i = 2038; i < 2048; ++i) EXPECT_EQ(t.token_text(i), tiny->token_text(i)) << i;
  EXPECT_EQ(t.bos_id(), tiny->bos_id());
  EXPECT_EQ(t.eos_id(), tiny->eos_id());
  EXPECT_EQ(t.eot_id(), tiny->eot_id());
  EXPECT_EQ(t.eom_id(), tiny->eom_id());
}

void check_large() {
  const Tokenizer& t = tokt::synthetic_tokenizer(20000);
  ASSERT_EQ(t.n_vocab(), 20000);
  // The embedded text runs out of merges long before 20000: the rest is reserved control filler.
  EXPECT_EQ(t.token_type(19989), TokenType::Control);
  EXPECT_EQ(t.token_text(19990), "<|endoftext|>");
  for (const auto& e : tokt::awkward_corpus()) EXPECT_EQ(t.decode(t.encode(e.text)), e.text) << e.name;
}

const bool registered = [] {
  for (int64_t n : {266, 300, 2048, 20000})
    tokt::register_case("SyntheticVocab", "synthetic_vocab(n_vocab=" + std::to_string(n) + ")", [n] { check_layout(n); });
  tokt::register_case("SyntheticVocab", "synthetic_vocab_deterministic(n_vocab=2048)", check_deterministic);
  tokt::register_case("SyntheticVocab", "synthetic_vocab_common_words(n_vocab=2048)", check_common_words);
  tokt::register_case("SyntheticVocab", "synthetic_vocab_like_tiny(n_vocab=2048)", check_byte_tokens_match_tiny);
  tokt::register_case("SyntheticVocab", "synthetic_vocab_roundtrip(n_vocab=20000)", check_large);
  return true;
}();

}  // namespace
