// mlaconf synth: a small deterministic random generator (SplitMix64), one stream per tensor.
//
// Each tensor gets its own stream seeded from (seed, tensor name), so a tensor's bytes do not depend on
// which tensors come before it, on the shard it lands in, or on the chunk size used to stream it.
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

namespace mlaconf::synth {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  // Seeds from a model seed and a name (FNV-1a of the name, mixed with the seed).
  static Rng for_name(uint64_t seed, std::string_view name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
    Rng r(seed * 0x9e3779b97f4a7c15ull ^ h);
    r.next();
    return r;
  }
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [lo, hi].
  int64_t range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1)); }
  // Standard normal (Box-Muller; two uniforms per value, no cached spare, so streams stay simple).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  void fill_bytes(uint8_t* p, size_t n) {
    while (n >= 8) {
      uint64_t v = next();
      for (int k = 0; k < 8; ++k) p[k] = static_cast<uint8_t>(v >> (8 * k));
      p += 8;
      n -= 8;
    }
    if (n) {
      uint64_t v = next();
      for (size_t k = 0; k < n; ++k) p[k] = static_cast<uint8_t>(v >> (8 * k));
    }
  }

 private:
  uint64_t s_;
};

}  // namespace mlaconf::synth
