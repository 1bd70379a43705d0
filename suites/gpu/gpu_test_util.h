// suites/gpu: helpers shared by the GPU test files (device check, metrics, random data, registration).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixtures/compare.h"
#include "suites/common/case_registry.h"
#include "suites/quant/random_blocks.h"
#include "core/ggml_types.h"
#include "optimized/api.h"

namespace mlaconf::gputest {

// Skips the current test when there is no CUDA device (CI), with the reason.
#define MLACONF_REQUIRE_CUDA()                                              \
  do {                                                                      \
    std::string why_;                                                       \
    if (!::mlaconf::cuda::cuda_available(&why_)) GTEST_SKIP() << "not supported: " << why_; \
  } while (0)

// Case registration: suites/common/case_registry.h.
using ::mlaconf::test::register_case;

// NMSE sum (a-b)^2 / sum b^2 and cosine (b = reference) by the fixtures judge's metrics; a non-finite
// mismatch makes the NMSE infinite and the cosine 0 (the model cases' bounds then fail).
inline fx::DatasetResult metrics(const std::vector<float>& a, const std::vector<double>& b) {
  fx::Array e, x;
  e.dtype = x.dtype = fx::Dtype::F64;
  e.shape = x.shape = {(int64_t)b.size()};
  e.v = b;
  x.v.assign(a.begin(), a.begin() + std::min(a.size(), b.size()));
  x.v.resize(b.size(), NAN);  // a shorter actual: its missing values count as mismatches
  return fx::tensor_metrics(e, x);
}
inline double nmse(const std::vector<float>& a, const std::vector<double>& b) {
  const fx::DatasetResult m = metrics(a, b);
  return m.nonfinite_mismatch ? INFINITY : m.nmse;
}
inline double cosine(const std::vector<float>& a, const std::vector<double>& b) {
  const fx::DatasetResult m = metrics(a, b);
  return m.nonfinite_mismatch ? 0.0 : m.cosine;
}
// Values whose bits differ (memcmp; the larger size when the sizes differ): the bit-identity checks.
inline size_t n_differ(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], 4) != 0;
  return d;
}
inline bool all_finite(const std::vector<float>& a) {
  for (float v : a)
    if (!std::isfinite(v)) return false;
  return true;
}

// Uniform [-1, 1) values rounded to f16 (bits), and the same values as float.
inline void random_half(std::mt19937_64& rng, size_t n, float amp, std::vector<uint16_t>* bits, std::vector<float>* vals) {
  std::uniform_real_distribution<float> u(-amp, amp);
  bits->resize(n);
  vals->resize(n);
  for (size_t i = 0; i < n; ++i) {
    (*bits)[i] = cuda::float_to_half_bits(u(rng));
    (*vals)[i] = cuda::half_bits_to_float_host((*bits)[i]);
  }
}

// Random ggml blocks: suites/quant's generator (finite, sane scales).
using ::mlaconf::test::random_blocks;

// Weights for the GEMV/GEMM cases: random blocks whose float types (F32, BF16) keep |w| < 2, so that a
// dot product of thousands of them stays far from fp32 overflow (the generator spans every exponent).
inline std::vector<uint8_t> random_weights(GgmlType t, int64_t n_values, uint32_t seed) {
  std::vector<uint8_t> b = random_blocks(t, n_values / traits(t).block_size, seed);
  if (t == GgmlType::F32)
    for (size_t i = 3; i < b.size(); i += 4) b[i] &= 0xBF;  // exponent < 128
  if (t == GgmlType::BF16)
    for (size_t i = 1; i < b.size(); i += 2) b[i] &= 0xBF;
  return b;
}

}  // namespace mlaconf::gputest
