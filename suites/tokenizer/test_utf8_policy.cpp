// The invalid-UTF-8 policy (tokenizer/utf8.h): one U+FFFD per maximal subpart, the same in
// sanitize_utf8, Tokenizer::decode and the streaming decoder, fed whole or byte by byte.
#include "tok_test_util.h"
#include "tokenizer/utf8.h"

namespace {

using namespace mlaconf::tok;

const std::string R = "\xEF\xBF\xBD";

struct PolicyCase {
  const char* name;
  std::string in, out;
};

const std::vector<PolicyCase>& policy_cases() {
  static const std::vector<PolicyCase> v = {
      {"lone_continuation", "\x80", R},
      {"overlong_2byte", "\xC0\xAF", R + R},
      {"overlong_3byte", "\xE0\x80\xAF", R + R + R},
      {"truncated_3byte_then_ascii", "\xE1\x80" "A", R + "A"},
      {"surrogate", "\xED\xA0\x80", R + R + R},
      {"above_max", "\xF4\x90\x80\x80", R + R + R + R},
      {"truncated_4byte_at_end", "ok \xF0\x9F\x98", "ok " + R},
      {"truncated_4byte_then_ascii", "\xF0\x9F\x98" "A", R + "A"},
      {"ff_fe", "\xFF\xFE", R + R},
      {"f5_lead", "\xF5\x80", R + R},
      // Unicode ch. 3 (U+FFFD substitution of maximal subparts) example.
      {"unicode_table_3_8", "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", "a" + R + R + R + "b" + R + "c" + R + R + "d"},
      {"valid_mixed", "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z", "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z"},
      {"valid_edges", "\xF4\x8F\xBF\xBF\xEE\x80\x80\xED\x9F\xBF", "\xF4\x8F\xBF\xBF\xEE\x80\x80\xED\x9F\xBF"},
  };
  return v;
}

void check_policy(const PolicyCase& c) {
  EXPECT_EQ(sanitize_utf8(c.in), c.out) << tokt::escaped(c.in);
  EXPECT_TRUE(is_valid_utf8(c.out));
  EXPECT_EQ(is_valid_utf8(c.in), c.in == c.out);
  // Streaming, byte by byte: same text, every chunk well-formed.
  Utf8StreamDecoder d;
  std::string acc;
  for (char ch : c.in) {
    std::string part = d.feed(std::string(1, ch));
    EXPECT_TRUE(is_valid_utf8(part)) << tokt::escaped(part);
    acc += part;
  }
  acc += d.finish();
  EXPECT_EQ(acc, c.out);
  // Through the tokenizer: the bytes as single-byte tokens, decoded whole.
  if (const Tokenizer* t = tokt::tiny_tokenizer()) {
    std::vector<int32_t> ids;
    for (char ch : c.in) ids.push_back(t->find_token(byte_to_symbol(static_cast<uint8_t>(ch))));
    EXPECT_EQ(t->decode(ids), c.out);
  }
}

void check_byte_map() {
  // GPT-2's bytes_to_unicode: printable Latin-1 maps to itself, the rest from U+0100 on; a bijection.
  EXPECT_EQ(byte_to_codepoint('A'), 'A');
  EXPECT_EQ(byte_to_codepoint(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(byte_to_codepoint(0xAD), 0x143u);  // the soft hyphen is the last one remapped
  std::vector<int> seen(0x200, 0);
  for (int b = 0; b < 256; ++b) {
    uint32_t cp = byte_to_codepoint(static_cast<uint8_t>(b));
    ASSERT_LT(cp, 0x200u);
    EXPECT_EQ(seen[cp]++, 0);
    EXPECT_EQ(codepoint_to_byte(cp), b);
  }
  EXPECT_EQ(codepoint_to_byte(' '), -1);
  EXPECT_EQ(codepoint_to_byte(0x144), -1);
}

// Negative control: repairing each token's bytes on its own (a common streaming bug) turns an emoji
// split over byte tokens into U+FFFDs; the whole-decode and streaming tests must see the difference.
void negative_control_per_token_repair() {
  std::string emoji = "\xF0\x9F\x98\x80";
  std::string per_token;
  for (char ch : emoji) per_token += sanitize_utf8(std::string(1, ch));
  EXPECT_NE(per_token, sanitize_utf8(emoji));
  EXPECT_EQ(per_token, R + R + R + R);
}

const bool registered = [] {
  for (const auto& c : policy_cases())
    tokt::register_case("Utf8Policy", std::string("utf8_policy(case=") + c.name + ")", [c] { check_policy(c); });
  tokt::register_case("Utf8Policy", "gpt2_byte_map()", check_byte_map);
  tokt::register_case("Utf8Policy", "utf8_policy_negative(variant=per_token_repair)", negative_control_per_token_repair);
  return true;
}();

}  // namespace
