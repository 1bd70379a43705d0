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
// Judged three ways: (1) against float64 on the reference dequantizer's weights, |got - want| <= 2e-6 *
// sum |w x| (the emulation itself shows <= 3e-8 of that scale on these shapes); (2) bit for bit against
// the emulation; (3) every batch entry (B x on one matrix, and experts by id) bit-identical to the same x
// alone. Shapes: rows off the 8-row CTA (1, 7, 9, 33, 257, 1021), blocks per row 1, 2, 3, 11, 24, so that
// G runs from 4 to 64 and the last round of items is partial; the production 2048 x 6144 and 576 x 6144.
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
namespace {

constexpr double kBound = 2e-6;

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

std::vector<float> random_x(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

struct Judged {
  double worst = 0;
  int64_t not_exact = 0;
};
// y[e * rows + r] for entries e, entry e on matrix mat[e] and x_e = x + e * cols.
Judged judge(const std::vector<float>& got, const std::vector<uint8_t>& blocks, const std::vector<float>& W,
             const std::vector<int64_t>& mat, const std::vector<float>& x, int64_t rows, int64_t cols) {
  Judged o;
  const int64_t nb = cols / 256, G = groups(rows, nb);
  for (size_t e = 0; e < mat.size(); ++e)
    for (int64_t r = 0; r < rows; ++r) {
      const float* w = W.data() + (mat[e] * rows + r) * cols;
      const float* xe = x.data() + e * cols;
      double want = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        want += (double)w[c] * xe[c];
        mag += std::fabs((double)w[c] * xe[c]);
      }
      const float g = got[e * rows + r];
      const double err = mag > 0 ? std::fabs(g - want) / mag : std::fabs(g - want);
      o.worst = std::isfinite(g) ? std::max(o.worst, err) : INFINITY;
      const float em = emulate(blocks.data() + (mat[e] * rows + r) * nb * 144, xe, nb, G);
      if (std::memcmp(&em, &g, 4) != 0) ++o.not_exact;
    }
  return o;
}

void expect_judged(const Judged& j, const char* what) {
  std::printf("  %s: max |err| / sum|wx| %.3e (bound %.0e), %lld outputs off the emulated bits\n", what, j.worst, kBound,
              (long long)j.not_exact);
  EXPECT_LE(j.worst, kBound);
  EXPECT_EQ(j.not_exact, 0);
}

// B x on one matrix, then each entry alone (bit-identical).
void batch_case(int64_t rows, int64_t cols, int B) {
  MLACONF_REQUIRE_CUDA();
  const GgmlType t = GgmlType::Q4_K;
  const auto blocks = random_blocks(t, rows * cols / 256, 500 + 3 * rows + cols);
  const auto W = ref_dequant(t, blocks, rows * cols);
  const auto x = random_x((size_t)B * cols, 23 + B);
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y((size_t)B * rows * 4), d_y1((size_t)rows * 4);
  cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>(), d_y.as<float>(), B, 0, cols, rows);
  const auto got = cuda::to_host<float>(d_y, (size_t)B * rows);
  expect_judged(judge(got, blocks, W, std::vector<int64_t>(B, 0), x, rows, cols), "batched");
  int64_t differ = 0;
  for (int b = 0; b < B; ++b) {
    cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>() + (size_t)b * cols, d_y1.as<float>());
    const auto one = cuda::to_host<float>(d_y1, rows);
    differ += std::memcmp(one.data(), got.data() + (size_t)b * rows, rows * 4) != 0;
  }
  EXPECT_EQ(differ, 0) << differ << " of " << B << " entries differ from the same x run alone";
}

// Experts by id (repeated, out of order), one x per entry; each entry alone bit-identical.
void experts_case(int64_t rows, int64_t cols, std::vector<int32_t> ids) {
  MLACONF_REQUIRE_CUDA();
  const GgmlType t = GgmlType::Q4_K;
  const int64_t n = (int64_t)ids.size(), pool = 4;
  const auto blocks = random_blocks(t, pool * rows * cols / 256, 71 + rows);
  const auto W = ref_dequant(t, blocks, pool * rows * cols);
  const auto x = random_x((size_t)n * cols, 8);
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x), d_ids = cuda::to_device(ids);
  cuda::DeviceBuffer d_y((size_t)n * rows * 4);
  const int64_t stride = rows * row_bytes(t, cols);
  cuda::gemv_experts(t, d_w.get(), stride, d_ids.as<int32_t>(), n, rows, cols, d_x.as<float>(), cols, d_y.as<float>(), rows);
  const auto got = cuda::to_host<float>(d_y, (size_t)n * rows);
  expect_judged(judge(got, blocks, W, std::vector<int64_t>(ids.begin(), ids.end()), x, rows, cols), "experts");
  int64_t differ = 0;
  for (int64_t e = 0; e < n; ++e) {
    cuda::DeviceBuffer d_id = cuda::to_device(std::vector<int32_t>{ids[e]}), d_y1((size_t)rows * 4);
    cuda::gemv_experts(t, d_w.get(), stride, d_id.as<int32_t>(), 1, rows, cols, d_x.as<float>() + (size_t)e * cols, cols,
                       d_y1.as<float>(), rows);
    const auto one = cuda::to_host<float>(d_y1, rows);
    differ += std::memcmp(one.data(), got.data() + (size_t)e * rows, rows * 4) != 0;
  }
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
  register_case("gemv_q4k", "gemv_experts(type=Q4_K,pool=4,n=10,rows=33,cols=768)",
                [] { experts_case(33, 768, {2, 0, 2, 3, 1, 2, 2, 0, 3, 2}); });
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
