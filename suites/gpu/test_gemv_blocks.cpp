// suites/gpu: the block-streaming dequant GEMV (optimized/gemv_blocks.cu) for Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q2_K, Q3_K, Q5_K, Q6_K, reached through cuda::gemv / gemv_experts / gemv_per_head.
//
// Each case is judged three ways:
//  1. against the reference dequantizer's weights times x in double: per output,
//     |got - want| <= kGemvBound * sum_c |w_c x_c| (suites/gpu/gemv_bits.h: the checks shared with the
//     Q4_K kernel's suite). The same fp32 order of operations emulated on the host (below) shows at most 2.1e-7 of that scale over these shapes (cols 32: 2.1e-7; 96: 8.7e-8; 768 and
//     up: <= 3.2e-8; measured on the CPU with random data, 20 trials of 257 rows), so the bound is 2e-6.
//  2. bit for bit against that host emulation (lane l sums the 8-value groups l, l + 32, ... with fmaf in
//     column order, then the xor tree over 32 lanes; Q8_0: lane l sums the 32-value sub-blocks l, l + 32,
//     ...; per-head matrices (gemv_per_head) of rows of at most 256 values of a 32-value block type (the
//     short-row kernel, a row per lane): one fmaf
//     chain over the columns in order): the kernels' documented orders, exactly.
//  3. batch invariance: every entry of a batch bit-identical to the same x run alone (B = 1).
// Shapes are off every tile multiple: rows 1, 7, 9, 31, 33, 255, 257, 1021 (16 rows per CTA, 4 per
// warp), columns 1, 2, 3 blocks and a multiple past one 32-sub-block chunk (37 blocks of 32 values,
// 11 blocks of 256: a partial last chunk). Batches 1, 3, 8, 17 (8 x per pass: 17 is three passes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/error.h"
#include "optimized/api.h"
#include "suites/gpu/gemv_bits.h"
#include "suites/gpu/gpu_test_util.h"
#include "suites/gpu/host_ref.h"

namespace mlaconf::gputest {
namespace {

// The kernels this file emulates, pinned at every shape.
constexpr cuda::GemvKernel kSimt = cuda::GemvKernel::Simt;

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                           GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K, GgmlType::Q6_K};

// The kernel's fp32 order of operations for one row and one x (see the file comment). per_head: the entries
// are on per-head matrices (gemv_per_head), the only calls the short-row kernel takes.
float emulate(GgmlType t, const float* w, const float* x, int64_t cols, bool per_head) {
  if (per_head && cols <= 256 && traits(t).block_size == 32) {  // optimized/gemv_blocks.cu kShortMaxCols
    float p = 0.f;
    for (int64_t c = 0; c < cols; ++c) p = std::fma(w[c], x[c], p);
    return p;
  }
  const int64_t run = t == GgmlType::Q8_0 ? 32 : 8;  // lane l takes the runs l, l + 32, ... of this many values
  const int64_t nruns = cols / run;
  float p[32] = {};
  for (int l = 0; l < 32; ++l)
    for (int64_t u = l; u < nruns; u += 32)
      for (int64_t k = 0; k < run; ++k) p[l] = std::fma(w[u * run + k], x[u * run + k], p[l]);
  for (int o = 16; o > 0; o >>= 1) {
    float q[32];
    for (int l = 0; l < 32; ++l) q[l] = p[l] + p[l ^ o];
    std::memcpy(p, q, sizeof p);
  }
  return p[0];
}

// The emulation of type t over the dequantized matrices W [mats * rows, cols].
MakeEmulation emulation(GgmlType t, int64_t rows, int64_t cols, bool per_head = false) {
  return [=](const std::vector<uint8_t>&, const std::vector<float>& W) -> RowEmulation {
    return [t, rows, cols, per_head, &W](int64_t mat, int64_t row, const float* x) {
      return emulate(t, W.data() + (mat * rows + row) * cols, x, cols, per_head);
    };
  };
}
Judged judge(GgmlType t, const std::vector<float>& got, const std::vector<float>& W, const std::vector<int64_t>& mat,
             const std::vector<float>& x, int64_t rows, int64_t cols, bool per_head = false) {
  return judge_gemv(got, W, mat, x, rows, cols, emulation(t, rows, cols, per_head)({}, W));
}

// B x vectors on one matrix (batched decode); then each entry alone, bit-identical.
void batch_case(GgmlType t, int64_t rows, int64_t cols, int B) {
  MLACONF_REQUIRE_CUDA();
  gemv_batch_check(kSimt, t, rows, cols, B, 1000 + 7 * rows + cols + (int)t, 17 + B, emulation(t, rows, cols));
}

// Expert batches by id: entries on the same expert are one group (decoded once per pass of 8), ids out
// of order and repeated (11 entries on expert 2: two passes), one x per entry.
void experts_case(GgmlType t, int64_t rows, int64_t cols, std::vector<int32_t> ids) {
  MLACONF_REQUIRE_CUDA();
  gemv_experts_check(kSimt, t, rows, cols, ids, 4, 77 + (int)t, 5, emulation(t, rows, cols));
}

// Per-head matrices (b % H): T = 3 tokens x H heads, groups of 3 entries with step H.
void per_head_case(GgmlType t, int64_t rows, int64_t cols, int64_t H = 4) {
  MLACONF_REQUIRE_CUDA();
  const int64_t bs = traits(t).block_size, n = 3 * H;
  const auto blocks = random_blocks(t, H * rows * cols / bs, 91 + (int)t);
  const auto W = ref_dequant(t, blocks, H * rows * cols);
  const auto x = random_x((size_t)n * cols, 6);
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y((size_t)n * rows * 4);
  cuda::gemv_per_head(t, d_w.get(), rows, cols, H, d_x.as<float>(), cols, d_y.as<float>(), rows, n, kSimt);
  std::vector<int64_t> mat(n);
  for (int64_t b = 0; b < n; ++b) mat[b] = b % H;
  expect_judged(judge(t, cuda::to_host<float>(d_y, (size_t)n * rows), W, mat, x, rows, cols, true), "per head");
}

// Negative controls: the judge rejects a result off by one row (rows swapped) and one fp32 ulp off
// the emulated bits, so checks 1 and 2 can fail.
void negative_control_case() {
  MLACONF_REQUIRE_CUDA();
  const GgmlType t = GgmlType::Q6_K;
  const int64_t rows = 33, cols = 768;
  const auto blocks = random_blocks(t, rows * cols / 256, 4242);
  const auto W = ref_dequant(t, blocks, rows * cols);
  const auto x = random_x(cols, 9);
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y(rows * 4);
  cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>(), d_y.as<float>(), 1, 0, 0, 0, kSimt);
  auto got = cuda::to_host<float>(d_y, rows);
  const Judged ok = judge(t, got, W, {0}, x, rows, cols);
  EXPECT_LE(ok.worst, kGemvBound);
  auto swapped = got;
  std::swap(swapped[3], swapped[4]);
  const Judged bad = judge(t, swapped, W, {0}, x, rows, cols);
  std::printf("  rows 3 and 4 swapped: max |err| / sum|wx| %.3e (bound %.0e)\n", bad.worst, kGemvBound);
  EXPECT_GT(bad.worst, 100 * kGemvBound);
  auto ulp = got;
  uint32_t u;
  std::memcpy(&u, &ulp[7], 4);
  ++u;
  std::memcpy(&ulp[7], &u, 4);
  EXPECT_EQ(judge(t, ulp, W, {0}, x, rows, cols).not_exact, 1);
}

std::string cols_tag(int64_t cols) { return std::to_string(cols); }

const bool registered = [] {
  const int64_t kRows[] = {1, 7, 9, 31, 33, 255, 257, 1021};
  const int kBatches[] = {1, 3, 8, 17};
  for (GgmlType t : kTypes) {
    const int64_t bs = traits(t).block_size;
    const int64_t kCols[] = {bs, 2 * bs, 3 * bs, bs == 32 ? 37 * bs : 11 * bs};
    int k = 0;
    for (int64_t rows : kRows)
      for (int64_t cols : kCols) {
        const int B = kBatches[k++ % 4];
        register_case("gemv_blocks",
                      std::string("gemv(type=") + type_name(t) + ",rows=" + std::to_string(rows) + ",cols=" + cols_tag(cols) +
                          ",b=" + std::to_string(B) + ")",
                      [=] { batch_case(t, rows, cols, B); });
      }
    // A batch of 17 on the production-like width (several chunks per row).
    register_case("gemv_blocks", std::string("gemv(type=") + type_name(t) + ",rows=257,cols=6144,b=17)",
                  [=] { batch_case(t, 257, 6144, 17); });
    const std::vector<int32_t> ids = {2, 0, 2, 2, 3, 2, 1, 2, 2, 0, 2, 2, 2, 3, 2, 2};
    register_case("gemv_blocks", std::string("gemv_experts(type=") + type_name(t) + ",pool=4,n=16,rows=33,cols=" +
                                     cols_tag(3 * bs) + ")",
                  [=] { experts_case(t, 33, 3 * bs, ids); });
    register_case("gemv_blocks", std::string("gemv_experts(type=") + type_name(t) + ",pool=4,ids=3|1,rows=9,cols=" +
                                     cols_tag(2 * bs) + ")",
                  [=] { experts_case(t, 9, 2 * bs, {3, 1}); });
    register_case("gemv_blocks", std::string("gemv_per_head(type=") + type_name(t) + ",h=4,t=3,rows=31,cols=" +
                                     cols_tag(2 * bs) + ")",
                  [=] { per_head_case(t, 31, 2 * bs); });
  }
  // The short-row kernel's edges (per-head matrices only): 256 columns (its widest rows; Q8_0's 272 bytes fill its
  // staging) and 288 (the block kernel again), rows off its 32 per warp and 128 per CTA; GLM-5's attn_k_b (64 heads
  // of 512 x 192 Q5_0).
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q5_0})
    for (int64_t cols : {256, 288})
      register_case("gemv_blocks", std::string("gemv_per_head(type=") + type_name(t) + ",h=3,t=3,rows=129,cols=" + cols_tag(cols) + ")",
                    [=] { per_head_case(t, 129, cols, 3); });
  register_case("gemv_blocks", "gemv_per_head(type=Q5_0,h=64,t=3,rows=512,cols=192)",
                [] { per_head_case(GgmlType::Q5_0, 512, 192, 64); });
  register_case("gemv_blocks", "negative_controls(type=Q6_K,rows=33,cols=768)", negative_control_case);
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
