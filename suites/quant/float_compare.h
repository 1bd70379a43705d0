// suites/quant: bit-for-bit float comparison with a readable report of the first differences.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

namespace mlaconf::test {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Distance in units in the last place between two finite floats of any sign (0 for +0 vs -0 is NOT
// used here: bit-exactness is checked separately). Maps the bit patterns onto a monotonic integer line.
inline int64_t ulp_distance(float a, float b) {
  auto key = [](float f) -> int64_t {
    const uint32_t u = float_bits(f);
    return (u & 0x80000000u) ? -static_cast<int64_t>(u & 0x7FFFFFFFu) : static_cast<int64_t>(u);
  };
  const int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

struct BitCompare {
  int64_t n = 0;
  int64_t mismatches = 0;
  int64_t max_ulps = 0;   // over finite pairs
  std::string first;      // description of the first few mismatches
  bool exact() const { return mismatches == 0; }
};

// Compares got vs want bit for bit (so -0 != +0 and NaN payloads count).
inline BitCompare compare_bits(const float* got, const float* want, int64_t n) {
  BitCompare r;
  r.n = n;
  std::ostringstream os;
  for (int64_t i = 0; i < n; ++i) {
    if (float_bits(got[i]) == float_bits(want[i])) continue;
    ++r.mismatches;
    if (std::isfinite(got[i]) && std::isfinite(want[i])) r.max_ulps = std::max(r.max_ulps, ulp_distance(got[i], want[i]));
    if (r.mismatches <= 4) {
      os << " [" << i << "] got " << got[i] << " (0x" << std::hex << float_bits(got[i]) << ") want " << want[i]
         << " (0x" << float_bits(want[i]) << std::dec << ")";
    }
  }
  r.first = os.str();
  return r;
}

}  // namespace mlaconf::test
