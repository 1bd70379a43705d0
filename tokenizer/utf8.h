// mlaconf tokenizer: UTF-8 validation and repair, and GPT-2's byte <-> unicode map.
//
// Invalid UTF-8 policy (used by encode, decode and the streaming decoder alike):
//   every maximal subpart of an ill-formed sequence becomes one U+FFFD (EF BF BD). This is the
//   "substitution of maximal subparts" practice of Unicode (ch. 3, U+FFFD substitution) and of the
//   WHATWG decoder; Python's bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy
//   (which Hugging Face tokenizers' decoders use) follow it too. Examples:
//     "\xC0\xAF"      -> U+FFFD U+FFFD   (C0 can never start a sequence)
//     "\xE1\x80A"     -> U+FFFD 'A'      (a truncated but well-begun sequence is one subpart)
//     "\xED\xA0\x80"  -> 3 x U+FFFD      (a surrogate: ED may only be followed by 80..9F)
//   Because the rule only looks forward, a decoder that holds back an incomplete-but-valid tail and
//   decides it once the next byte arrives produces exactly the text of a whole-buffer decode.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace mlaconf::tok {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Incremental UTF-8 decoder with the policy above. feed() returns the bytes that are final now
// (well-formed UTF-8, ill-formed parts replaced); an incomplete tail of at most 3 bytes that could
// still become a character is held back. finish() decides that tail (one U+FFFD) and resets.
class Utf8StreamDecoder {
 public:
  std::string feed(std::string_view bytes);
  std::string finish();
  size_t pending() const { return n_pending_; }

 private:
  void put(unsigned char b, std::string& out);
  std::array<unsigned char, 4> pending_{};
  size_t n_pending_ = 0;
  int need_ = 0;               // continuation bytes still expected
  unsigned char lo_ = 0x80;    // allowed range of the next continuation byte
  unsigned char hi_ = 0xBF;
};

// Whole-buffer repair: well-formed input is returned unchanged.
std::string sanitize_utf8(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

// Appends the UTF-8 encoding of code point cp (< 0x110000, no surrogates).
void append_utf8(uint32_t cp, std::string& out);

// GPT-2's bytes_to_unicode(): each byte maps to a printable code point (printable Latin-1 bytes to
// themselves, the other 68 to U+0100 + n in byte order). Byte-level BPE vocabularies spell their
// tokens in these characters ("Ġ" = U+0120 = the space byte).
uint32_t byte_to_codepoint(uint8_t b);
// The inverse; returns -1 for code points that are not one of the 256.
int codepoint_to_byte(uint32_t cp);
// The UTF-8 spelling of byte b's character.
const std::string& byte_to_symbol(uint8_t b);

// Decodes one code point starting at s[i] of well-formed UTF-8; returns its length (1 on a bad byte,
// with *cp = 0xFFFD).
size_t decode_codepoint(std::string_view s, size_t i, uint32_t* cp);

}  // namespace mlaconf::tok
