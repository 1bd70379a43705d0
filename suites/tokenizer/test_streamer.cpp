// The streaming decoder gives the same text as a whole decode, split at every token, and never emits
// a broken UTF-8 sequence: on the corpus as tokenized, on the corpus as single-byte tokens (every
// multi-byte character spans tokens), and on random token sequences (invalid UTF-8 included).
#include <algorithm>
#include <random>

#include "corpus.h"
#include "tok_test_util.h"
#include "tokenizer/streamer.h"
#include "tokenizer/utf8.h"

namespace {

using namespace mlaconf::tok;

const Tokenizer* get(const std::string& which) {
  if (which == "glm_dsa_tiny") return tokt::tiny_tokenizer();
  return &tokt::synthetic_tokenizer(std::stoll(which.substr(std::string("synthetic-").size())));
}

// Streams ids one at a time; checks each chunk is well-formed and the whole equals decode(ids).
void stream_and_compare(const Tokenizer& t, const std::vector<int32_t>& ids, DecodeOptions opt, size_t* max_pending) {
  TextStreamer s(t, opt);
  std::string acc;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string part = s.push(ids[i]);
    ASSERT_TRUE(is_valid_utf8(part)) << "chunk after token " << i << " is not UTF-8: " << tokt::escaped(part);
    ASSERT_LE(s.pending_bytes(), 3u);
    *max_pending = std::max(*max_pending, s.pending_bytes());
    acc += part;
  }
  std::string tail = s.flush();
  ASSERT_TRUE(is_valid_utf8(tail));
  acc += tail;
  EXPECT_EQ(s.pending_bytes(), 0u);
  EXPECT_EQ(acc, t.decode(ids, opt));
}

void check_stream(const std::string& which, const tokt::CorpusEntry& e, const std::string& split) {
  const Tokenizer* t = get(which);
  if (!t) GTEST_SKIP() << "skipped: " << tokt::tiny_gguf_path() << " not found (../shared absent)";
  std::vector<int32_t> ids;
  if (split == "token") {
    ids = t->encode(e.text);
  } else {
    for (char ch : e.text) ids.push_back(t->find_token(byte_to_symbol(static_cast<uint8_t>(ch))));
  }
  size_t max_pending = 0;
  stream_and_compare(*t, ids, {}, &max_pending);
  stream_and_compare(*t, ids, {.special = false}, &max_pending);
  EXPECT_EQ(t->decode(ids), e.text);
  bool multibyte = false;
  for (unsigned char c : e.text) multibyte |= c >= 0x80;
  if (split == "byte") {
    EXPECT_EQ(max_pending > 0, multibyte) << "byte split should hold back partial characters";
  }
}

void check_random(const std::string& which, uint32_t seed) {
  const Tokenizer* t = get(which);
  if (!t) GTEST_SKIP() << "skipped: ../shared absent";
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> any(0, t->n_vocab() - 1);
  std::uniform_int_distribution<int> byte(0x80, 0xFF), coin(0, 3);
  for (int rep = 0; rep < 200; ++rep) {
    std::vector<int32_t> ids;
    int n = 1 + rep % 24;
    for (int i = 0; i < n; ++i) {
      // Mostly high byte tokens (lead and continuation bytes in every combination), some whole tokens.
      ids.push_back(coin(rng) ? t->find_token(byte_to_symbol(static_cast<uint8_t>(byte(rng)))) : any(rng));
    }
    size_t max_pending = 0;
    stream_and_compare(*t, ids, {}, &max_pending);
    if (testing::Test::HasFatalFailure()) return;
  }
}

// Negative control: a streamer that emits each token's bytes as they come produces broken UTF-8
// chunks as soon as a character spans tokens; the validity check above must flag that.
void negative_control_naive_streamer() {
  const Tokenizer& t = tokt::synthetic_tokenizer(2048);
  std::string text = "snow \xE2\x9D\x84\xEF\xB8\x8F and \xF0\x9F\x8C\x8A";
  int broken = 0;
  for (char ch : text) {
    std::string naive = t.token_bytes(t.find_token(byte_to_symbol(static_cast<uint8_t>(ch))));
    broken += !is_valid_utf8(naive);
  }
  EXPECT_GT(broken, 0);
}

const bool registered = [] {
  for (const char* which : {"glm_dsa_tiny", "synthetic_2048"}) {
    for (const auto& e : tokt::awkward_corpus())
      for (const char* split : {"token", "byte"})
        tokt::register_case("TokenizerStream",
                            std::string("stream(tokenizer=") + which + ",text=" + e.name + ",split=" + split + ")",
                            [which, e, split] { check_stream(which, e, split); });
    tokt::register_case("TokenizerStream", std::string("stream_random(tokenizer=") + which + ",seed=7,n=200)",
                        [which] { check_random(which, 7); });
  }
  tokt::register_case("TokenizerStream", "stream_negative(variant=naive_per_token_bytes)", negative_control_naive_streamer);
  return true;
}();

}  // namespace
