// suites/gpu: the Q4_K decode GEMV (optimized/gemv.cu, gemv_q4k_v2_kernel) bit for bit against a host
// emulation of its documented fp32 order, and batch invariance.
//
// The kernel's order for one row (gemv.cu): items (block b, pair j) of 64 values, item i = 4 b + j; a CTA
// has G groups (G from the shape alone, q4k_v2_groups: emulated here by groups() and to be kept equal);
// group g sums its items g, g + G, ... into one accumulator: per item
//   dot_lo = fmaf chain over sub-block 2j's 32 values (nibble times x) in column order; dot_hi for 2j + 1;
//   sum of x per sub-block: four partial sums of 8 values ((x0+x1)+(x2+x3)) + ((x4+x5)+(x6+x7)), then
//   (p0 + p1) + (p2 + p3);
//   acc += (d*sc_lo)*dot_lo - (dmin*m_lo)*sum_lo; acc += (d*sc_hi)*dot_hi - (dmin*m_hi)*sum_hi;
// then groups 4w..4w+3 (warp w) combine as (a0 + a1) + (a2 + a3), and the warps' partials add in warp order.
// Judged three ways (suites/gpu/gemv_bits.h, shared with the block kernel's suite): (1) against float64
// on the reference dequantizer's weights, |got - want| <= 2e-6 * sum |w x| (the emulation itself shows
// <= 3e-8 of that scale on these shapes); (2) bit for bit against
// the emulation; (3) every batch entry (B x on one matrix, and experts by id) bit-identical to the same x
// alone. Shapes: rows off the 8-row CTA (1, 7, 9, 33, 257, 1021), blocks per row 1, 2, 3, 11, 24, so that
// G runs from 4 to 64 and the last round of items is partial; the production 2048 x 6144 and 576 x 6144.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "optimized/api.h"
#include "suites/gpu/gemv_bits.h"
#include "suites/gpu/gpu_test_util.h"
#include "suites/gpu/host_ref.h"

namespace mlaconf::gputest {
namespace {

// The kernels this file emulates, pinned at every shape.
constexpr cuda::GemvKernel kSimt = cuda::GemvKernel::Simt;

// gemv.cu's q4k_v2_groups.
int64_t groups(int64_t rows, int64_t nb) {
  const int64_t items = nb * 4, ctas = (rows + 7) / 8, slots = 132 * 768;
  const int64_t per = std::max<int64_t>(1, (items * ctas * 8 + slots - 1) / slots);
  int64_t G = (items + per - 1) / per;
  G = (G + 3) / 4 * 4;
  return std::min<int64_t>(std::max<int64_t>(G, 4), 64);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu, bits;
  if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);
  else if (exp == 0) {
    if (man == 0) bits = sign;
    else {
      int e = -1;
      do { man <<= 1; ++e; } while ((man & 0x400u) == 0);
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// ggml's get_scale_min_k4.
void scale_min(int s, const uint8_t* q, int* sc, int* m) {
  if (s < 4) *sc = q[s] & 63, *m = q[s + 4] & 63;
  else *sc = (q[s + 4] & 0xF) | ((q[s - 4] >> 6) << 4), *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
}

// One row (nb blocks of 144 bytes at blk) times x, in the kernel's order.
float emulate(const uint8_t* blk, const float* x, int64_t nb, int64_t G) {
  const int64_t nitems = nb * 4;
  std::vector<float> part(G, 0.f);
  for (int64_t g = 0; g < G; ++g) {
    float acc = 0.f;
    for (int64_t it = g; it < nitems; it += G) {
      const int64_t b = it / 4;
      const int j = (int)(it % 4);
      const uint8_t* B = blk + b * 144;
      const uint8_t* qs = B + 16 + 32 * j;
      const float* xl = x + b * 256 + 64 * j;
      float dl = 0.f, dh = 0.f;
      for (int l = 0; l < 32; ++l) {
        dl = std::fma((float)(qs[l] & 0xF), xl[l], dl);
        dh = std::fma((float)(qs[l] >> 4), xl[32 + l], dh);
      }
      float p[8];
      for (int r = 0; r < 8; ++r) {
        const float* v = xl + 8 * r;
        p[r] = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
      }
      const float sum_lo = (p[0] + p[1]) + (p[2] + p[3]), sum_hi = (p[4] + p[5]) + (p[6] + p[7]);
      const float d = half_to_float((uint16_t)(B[0] | (B[1] << 8))), dmin = half_to_float((uint16_t)(B[2] | (B[3] << 8)));
      int sc0, m0, sc1, m1;
      scale_min(2 * j, B + 4, &sc0, &m0);
      scale_min(2 * j + 1, B + 4, &sc1, &m1);
      const float lo = (d * (float)sc0) * dl, lom = (dmin * (float)m0) * sum_lo;
      acc = acc + (lo - lom);
      const float hi = (d * (float)sc1) * dh, him = (dmin * (float)m1) * sum_hi;
      acc = acc + (hi - him);
    }
    part[g] = acc;
  }
  float total = 0.f;
  for (int64_t w = 0; w < G / 4; ++w) {
    const float v = (part[4 * w] + part[4 * w + 1]) + (part[4 * w + 2] + part[4 * w + 3]);
    total = w == 0 ? v : total + v;
  }
  return total;
}

// The kernel's order for row `row` of matrix `mat`, from the raw blocks (the emulation above).
MakeEmulation emulation(int64_t rows, int64_t cols) {
  return [=](const std::vector<uint8_t>& blocks, const std::vector<float>&) -> RowEmulation {
    const int64_t nb = cols / 256, G = groups(rows, nb);
    return [&blocks, rows, nb, G](int64_t mat, int64_t row, const float* x) {
      return emulate(blocks.data() + (mat * rows + row) * nb * 144, x, nb, G);
    };
  };
}

// B x on one matrix, then each entry alone (bit-identical).
void batch_case(int64_t rows, int64_t cols, int B) {
  MLACONF_REQUIRE_CUDA();
  gemv_batch_check(kSimt, GgmlType::Q4_K, rows, cols, B, 500 + 3 * rows + cols, 23 + B, emulation(rows, cols));
}

// Experts by id (repeated, out of order), one x per entry; each entry alone bit-identical.
void experts_case(int64_t rows, int64_t cols, std::vector<int32_t> ids) {
  MLACONF_REQUIRE_CUDA();
  gemv_experts_check(kSimt, GgmlType::Q4_K, rows, cols, ids, 4, 71 + rows, 8, emulation(rows, cols));
}

// Per-head matrices (gemv_per_head: entry b on head b % H, the pipeline's W_UV), T tokens: each head's pass takes up
// to 4 of its tokens (v12), so T = 5 and 9 leave a partial pass; judged, bit for bit against the emulation, and
// each entry bit-identical to its x run alone on its head's matrix.
void per_head_case(int64_t rows, int64_t cols, int64_t H, int64_t T) {
  MLACONF_REQUIRE_CUDA();
  const int64_t n = T * H, nb = cols / 256;
  const auto blocks = random_blocks(GgmlType::Q4_K, H * rows * nb, 900 + rows + H + T);
  const auto W = ref_dequant(GgmlType::Q4_K, blocks, H * rows * cols);
  const auto x = random_x((size_t)(n * cols), 37 + T);
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y((size_t)(n * rows * 4));
  cuda::gemv_per_head(GgmlType::Q4_K, d_w.get(), rows, cols, H, d_x.as<float>(), cols, d_y.as<float>(), rows, n, kSimt);
  const auto got = cuda::to_host<float>(d_y, (size_t)(n * rows));
  std::vector<int64_t> mat((size_t)n);
  for (int64_t j = 0; j < n; ++j) mat[(size_t)j] = j % H;
  expect_judged(judge_gemv(got, W, mat, x, rows, cols, emulation(rows, cols)(blocks, W)), "per head");
  const int64_t stride = rows * nb * 144;
  const int64_t differ = entries_unlike_alone(got, n, rows, [&](int64_t j, float* d_y1) {
    cuda::gemv(GgmlType::Q4_K, d_w.as<uint8_t>() + (j % H) * stride, rows, cols, d_x.as<float>() + j * cols, d_y1, 1, 0, cols, rows, kSimt);
  });
  EXPECT_EQ(differ, 0) << differ << " of " << n << " entries differ from the same x run alone";
}

const bool registered = [] {
  const int64_t kRows[] = {1, 7, 9, 33, 257, 1021};
  const int64_t kBlocks[] = {1, 2, 3, 11, 24};
  const int kBatches[] = {1, 3, 8};
  int k = 0;
  for (int64_t rows : kRows)
    for (int64_t nb : kBlocks) {
      const int B = kBatches[k++ % 3];
      register_case("gemv_q4k",
                    "gemv(type=Q4_K,rows=" + std::to_string(rows) + ",cols=" + std::to_string(nb * 256) + ",b=" +
                        std::to_string(B) + ")",
                    [=] { batch_case(rows, nb * 256, B); });
    }
  register_case("gemv_q4k", "gemv(type=Q4_K,rows=2048,cols=6144,b=2)", [] { batch_case(2048, 6144, 2); });
  register_case("gemv_q4k", "gemv(type=Q4_K,rows=576,cols=6144,b=1)", [] { batch_case(576, 6144, 1); });
  for (const auto& [rows, cols, H, T] : {std::array<int64_t, 4>{256, 512, 64, 9}, {33, 768, 3, 5}, {9, 256, 5, 2}, {256, 512, 64, 1}})
    register_case("gemv_q4k", "gemv_per_head(type=Q4_K,rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols) + ",heads=" +
                                  std::to_string(H) + ",t=" + std::to_string(T) + ")",
                  [=] { per_head_case(rows, cols, H, T); });
  register_case("gemv_q4k", "gemv_experts(type=Q4_K,pool=4,n=10,rows=33,cols=768)",
                [] { experts_case(33, 768, {2, 0, 2, 3, 1, 2, 2, 0, 3, 2}); });
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
