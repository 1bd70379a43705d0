// mlaconf tokenizer: UTF-8 repair (maximal-subpart U+FFFD policy) and the GPT-2 byte map.
#include "tokenizer/utf8.h"

#include <vector>

namespace mlaconf::tok {

// One byte through the state machine of Unicode Table 3-7 (well-formed UTF-8 byte sequences).
void Utf8StreamDecoder::put(unsigned char b, std::string& out) {
  if (need_ == 0) {
    auto start = [&](int need, unsigned char lo, unsigned char hi) {
      pending_[0] = b;
      n_pending_ = 1;
      need_ = need;
      lo_ = lo;
      hi_ = hi;
    };
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
    } else if (b >= 0xC2 && b <= 0xDF) {
      start(1, 0x80, 0xBF);
    } else if (b == 0xE0) {
      start(2, 0xA0, 0xBF);  // no overlong 3-byte forms
    } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
      start(2, 0x80, 0xBF);
    } else if (b == 0xED) {
      start(2, 0x80, 0x9F);  // no surrogates
    } else if (b == 0xF0) {
      start(3, 0x90, 0xBF);  // no overlong 4-byte forms
    } else if (b >= 0xF1 && b <= 0xF3) {
      start(3, 0x80, 0xBF);
    } else if (b == 0xF4) {
      start(3, 0x80, 0x8F);  // nothing above U+10FFFF
    } else {
      out += kReplacementChar;  // 80..C1, F5..FF never begin a character
    }
    return;
  }
  if (b >= lo_ && b <= hi_) {
    pending_[n_pending_++] = b;
    --need_;
    lo_ = 0x80;
    hi_ = 0xBF;
    if (need_ == 0) {
      out.append(reinterpret_cast<const char*>(pending_.data()), n_pending_);
      n_pending_ = 0;
    }
    return;
  }
  // The held prefix can never complete: it is one maximal subpart. b starts afresh.
  out += kReplacementChar;
  n_pending_ = 0;
  need_ = 0;
  put(b, out);
}

std::string Utf8StreamDecoder::feed(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + 4);
  for (char c : bytes) put(static_cast<unsigned char>(c), out);
  return out;
}

std::string Utf8StreamDecoder::finish() {
  std::string out;
  if (n_pending_ > 0) out += kReplacementChar;
  n_pending_ = 0;
  need_ = 0;
  return out;
}

std::string sanitize_utf8(std::string_view bytes) {
  Utf8StreamDecoder d;
  std::string out = d.feed(bytes);
  out += d.finish();
  return out;
}

bool is_valid_utf8(std::string_view bytes) {
  Utf8StreamDecoder d;
  std::string out = d.feed(bytes);
  return d.pending() == 0 && out.size() == bytes.size() && out == bytes;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::array<std::string, 256> to_sym;
  ByteMap() {
    // Printable bytes keep their code point; the others (controls, space, DEL, NBSP, soft hyphen)
    // are numbered from U+0100 in byte order.
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
      append_utf8(to_cp[b], to_sym[b]);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return byte_map().to_cp[b]; }
const std::string& byte_to_symbol(uint8_t b) { return byte_map().to_sym[b]; }

int codepoint_to_byte(uint32_t cp) {
  if (cp < 0x100) {
    bool printable = (cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF);
    return printable ? static_cast<int>(cp) : -1;
  }
  if (cp < 0x100 + 68) {
    // The n-th non-printable byte.
    static const std::vector<uint8_t> order = [] {
      std::vector<uint8_t> v;
      for (int b = 0; b < 256; ++b)
        if (byte_map().to_cp[b] >= 0x100) v.push_back(static_cast<uint8_t>(b));
      return v;
    }();
    return order[cp - 0x100];
  }
  return -1;
}

size_t decode_codepoint(std::string_view s, size_t i, uint32_t* cp) {
  auto u = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char b = u(i);
  size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  if (b >= 0x80 && b < 0xC0) len = 0;
  if (len == 0 || i + len > s.size()) {
    *cp = 0xFFFD;
    return 1;
  }
  uint32_t c = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < len; ++k) {
    if ((u(i + k) & 0xC0) != 0x80) {
      *cp = 0xFFFD;
      return 1;
    }
    c = (c << 6) | (u(i + k) & 0x3F);
  }
  *cp = c;
  return len;
}

}  // namespace mlaconf::tok
