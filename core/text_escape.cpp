// mlaconf: see text_escape.h.
#include "core/text_escape.h"

#include <cstdint>
#include <cstdio>

namespace mlaconf {

std::string escape_text(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  char b[16];
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      if (c == '\n') o += "\\n";
      else if (c == '\r') o += "\\r";
      else if (c == '\t') o += "\\t";
      else if (c < 0x20 || c == 0x7f) {
        std::snprintf(b, sizeof b, "\\x%02x", c);
        o += b;
      } else {
        o += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length by the lead byte, continuation bytes, no overlong form or surrogate.
    size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    uint32_t cp = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (p[i + k] & 0xc0) == 0x80;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if (ok) ok = !(len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) && !(len == 4 && (cp < 0x10000 || cp > 0x10ffff));
    if (!ok) {
      std::snprintf(b, sizeof b, "\\x%02x", c);
      o += b;
      ++i;
      continue;
    }
    if (cp >= 0x80 && cp <= 0x9f) {
      std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(cp));
      o += b;
    } else {
      o.append(s, i, len);
    }
    i += len;
  }
  return o;
}

}  // namespace mlaconf
