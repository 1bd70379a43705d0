// suites/gpu: the shared dequant-GEMV checks (see gemv_bits.h).
#include "suites/gpu/gemv_bits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "optimized/api.h"
#include "suites/gpu/gpu_test_util.h"
#include "suites/gpu/host_ref.h"

namespace mlaconf::gputest {

std::vector<float> random_x(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

Judged judge_gemv(const std::vector<float>& got, const std::vector<float>& W, const std::vector<int64_t>& mat,
                  const std::vector<float>& x, int64_t rows, int64_t cols, const RowEmulation& emulate) {
  Judged o;
  for (size_t j = 0; j < mat.size(); ++j)
    for (int64_t r = 0; r < rows; ++r) {
      const float* w = W.data() + (mat[j] * rows + r) * cols;
      const float* xj = x.data() + j * cols;
      double want = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        want += (double)w[c] * xj[c];
        mag += std::fabs((double)w[c] * xj[c]);
      }
      const float g = got[j * rows + r];
      const double e = mag > 0 ? std::fabs(g - want) / mag : std::fabs(g - want);
      o.worst = std::isfinite(g) ? std::max(o.worst, e) : INFINITY;
      if (!emulate) continue;
      const float em = emulate(mat[j], r, xj);
      if (std::memcmp(&em, &g, 4) != 0) ++o.not_exact;
    }
  return o;
}

void expect_judged(const Judged& j, const char* what, double bound) {
  std::printf("  %s: max |err| / sum|wx| %.3e (bound %.0e), %lld outputs off the emulated bits\n", what, j.worst, bound,
              (long long)j.not_exact);
  EXPECT_LE(j.worst, bound);
  EXPECT_EQ(j.not_exact, 0);
}

int64_t entries_unlike_alone(const std::vector<float>& got, int64_t n, int64_t rows,
                             const std::function<void(int64_t e, float* d_y)>& alone) {
  int64_t differ = 0;
  for (int64_t e = 0; e < n; ++e) {
    cuda::DeviceBuffer d_y1((size_t)rows * 4);  // a fresh buffer (poisoned): an entry not written cannot match
    alone(e, d_y1.as<float>());
    const auto one = cuda::to_host<float>(d_y1, rows);
    differ += std::memcmp(one.data(), got.data() + (size_t)e * rows, rows * 4) != 0;
  }
  return differ;
}

void gemv_batch_check(cuda::GemvKernel k, GgmlType t, int64_t rows, int64_t cols, int B, uint64_t w_seed, uint64_t x_seed,
                      const MakeEmulation& make, double bound) {
  const int64_t bs = traits(t).block_size;
  const auto blocks = random_blocks(t, rows * cols / bs, w_seed);
  const auto W = ref_dequant(t, blocks, rows * cols);
  const auto x = random_x((size_t)B * cols, x_seed);
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y((size_t)B * rows * 4);
  cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>(), d_y.as<float>(), B, 0, cols, rows, k);
  const auto got = cuda::to_host<float>(d_y, (size_t)B * rows);
  expect_judged(judge_gemv(got, W, std::vector<int64_t>(B, 0), x, rows, cols, make(blocks, W)), "batched", bound);
  const int64_t differ = entries_unlike_alone(got, B, rows, [&](int64_t b, float* d_y1) {
    cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>() + (size_t)b * cols, d_y1, 1, 0, 0, 0, k);
  });
  EXPECT_EQ(differ, 0) << differ << " of " << B << " entries differ from the same x run alone";
}

void gemv_experts_check(cuda::GemvKernel k, GgmlType t, int64_t rows, int64_t cols, const std::vector<int32_t>& ids, int64_t pool, uint64_t w_seed,
                        uint64_t x_seed, const MakeEmulation& make, double bound) {
  const int64_t bs = traits(t).block_size, n = (int64_t)ids.size();
  const auto blocks = random_blocks(t, pool * rows * cols / bs, w_seed);
  const auto W = ref_dequant(t, blocks, pool * rows * cols);
  const auto x = random_x((size_t)n * cols, x_seed);
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x), d_ids = cuda::to_device(ids);
  cuda::DeviceBuffer d_y((size_t)n * rows * 4);
  const int64_t stride = rows * row_bytes(t, cols);
  cuda::gemv_experts(t, d_w.get(), stride, d_ids.as<int32_t>(), n, rows, cols, d_x.as<float>(), cols, d_y.as<float>(), rows, nullptr, k);
  const auto got = cuda::to_host<float>(d_y, (size_t)n * rows);
  expect_judged(judge_gemv(got, W, std::vector<int64_t>(ids.begin(), ids.end()), x, rows, cols, make(blocks, W)), "experts", bound);
  const int64_t differ = entries_unlike_alone(got, n, rows, [&](int64_t j, float* d_y1) {  // each entry alone (one id)
    cuda::DeviceBuffer d_id = cuda::to_device(std::vector<int32_t>{ids[j]});
    cuda::gemv_experts(t, d_w.get(), stride, d_id.as<int32_t>(), 1, rows, cols, d_x.as<float>() + (size_t)j * cols, cols, d_y1, rows, nullptr, k);
  });
  EXPECT_EQ(differ, 0) << differ << " of " << n << " entries differ from the same x run alone";
}

}  // namespace mlaconf::gputest
