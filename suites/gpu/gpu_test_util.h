// suites/gpu: helpers shared by the GPU test files (device check, metrics, random data, registration).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "suites/common/case_registry.h"
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

// Normalised mean squared error sum (a-b)^2 / sum b^2 (b = reference), and cosine similarity.
inline double nmse(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den > 0 ? num / den : (num > 0 ? INFINITY : 0.0);
}
inline double cosine(const std::vector<float>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    ab += a[i] * b[i];
    aa += (double)a[i] * a[i];
    bb += b[i] * b[i];
  }
  return (aa > 0 && bb > 0) ? ab / std::sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
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

// n_blocks random ggml blocks of type t (finite, realistic scales; test_dequant.cpp).
std::vector<uint8_t> random_blocks(GgmlType t, int64_t n_blocks, uint64_t seed);

}  // namespace mlaconf::gputest
