// suites/gpu: fused dequant GEMV, prefill GEMM, W_UV, norms, RoPE and SiLU gate against float64 host code.
// Weights are dequantized on the host by the reference (or the CUDA formulas' host twin where the
// reference lacks a type), so the GEMV is judged on its arithmetic alone.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>

#include "core/error.h"
#include "optimized/api.h"
#include "suites/gpu/gpu_test_util.h"
#ifdef MLACONF_HAVE_REF_DEQUANT
#include "reference/dequant/dequant.h"
#endif

namespace mlaconf::gputest {
namespace {

std::vector<float> host_dequant(GgmlType t, const std::vector<uint8_t>& blocks, int64_t n) {
  std::vector<float> out(n);
#ifdef MLACONF_HAVE_REF_DEQUANT
  try {
    ref::dequantize(t, blocks.data(), out.data(), n);
    return out;
  } catch (const InputError&) {
  }
#endif
  cuda::dequantize_host(t, blocks.data(), n, out.data());
  return out;
}

std::vector<float> random_floats(std::mt19937_64& rng, size_t n, float amp = 1.f) {
  std::uniform_real_distribution<float> u(-amp, amp);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// y = W x for a rows x cols matrix of type t, GEMV fused with dequantization. NMSE <= 1e-10.
void gemv_case(GgmlType t, int64_t rows, int64_t cols) {
  MLACONF_REQUIRE_CUDA();
  const int64_t bs = traits(t).block_size;
  auto blocks = random_blocks(t, rows * cols / bs, 31 + (int)t);
  auto W = host_dequant(t, blocks, rows * cols);
  std::mt19937_64 rng(3);
  auto x = random_floats(rng, cols);
  std::vector<double> want(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) want[r] += (double)W[r * cols + c] * x[c];
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y(rows * 4);
  cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>(), d_y.as<float>());
  cuda::synchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>(), d_y.as<float>());
  cuda::synchronize();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 10;
  auto got = cuda::to_host<float>(d_y, rows);
  const double e = nmse(got, want);
  std::printf("  gemv %s %lldx%lld: NMSE %.3e, %.3f ms (%.1f GB/s of weights)\n", type_name(t), (long long)rows,
              (long long)cols, e, ms, blocks.size() / ms / 1e6);
  EXPECT_LE(e, 1e-10);
}

// All used experts of a token in one launch: y_j = W[ids[j]] x_j, experts picked out of order from a
// pool (x_stride 0: one x shared by all, as the routed experts of one token). NMSE <= 1e-10.
void gemv_experts_case(GgmlType t, int64_t pool, std::vector<int32_t> ids, int64_t rows, int64_t cols, bool shared_x) {
  MLACONF_REQUIRE_CUDA();
  const int64_t bs = traits(t).block_size, n = (int64_t)ids.size();
  auto blocks = random_blocks(t, pool * rows * cols / bs, 57 + (int)t);
  auto W = host_dequant(t, blocks, pool * rows * cols);
  std::mt19937_64 rng(4);
  auto x = random_floats(rng, shared_x ? cols : n * cols);
  std::vector<double> want(n * rows, 0.0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        want[j * rows + r] += (double)W[(ids[j] * rows + r) * cols + c] * x[(shared_x ? 0 : j * cols) + c];
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x), d_ids = cuda::to_device(ids);
  cuda::DeviceBuffer d_y(n * rows * 4);
  cuda::gemv_experts(t, d_w.get(), rows * row_bytes(t, cols), d_ids.as<int32_t>(), n, rows, cols, d_x.as<float>(),
                     shared_x ? 0 : cols, d_y.as<float>(), rows);
  auto got = cuda::to_host<float>(d_y, n * rows);
  const double e = nmse(got, want);
  std::printf("  gemv_experts %s %lld of %lld experts, %lldx%lld: NMSE %.3e\n", type_name(t), (long long)n, (long long)pool,
              (long long)rows, (long long)cols, e);
  EXPECT_LE(e, 1e-10);
}

// x not 16-byte aligned: the Q4_K GEMV falls back to the generic kernel, with the same answer.
void gemv_unaligned_case() {
  MLACONF_REQUIRE_CUDA();
  const GgmlType t = GgmlType::Q4_K;
  const int64_t rows = 100, cols = 512;
  auto blocks = random_blocks(t, rows * cols / 256, 5);
  auto W = host_dequant(t, blocks, rows * cols);
  std::mt19937_64 rng(6);
  auto x = random_floats(rng, cols + 1);
  std::vector<double> want(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) want[r] += (double)W[r * cols + c] * x[1 + c];
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y(rows * 4);
  cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>() + 1, d_y.as<float>());
  EXPECT_LE(nmse(cuda::to_host<float>(d_y, rows), want), 1e-10);
}

// Per-head W_UV: out[t,h] = W_h latent[t,h] for a Q4_K attn_v_b {d_v, v, H}.
void wuv_case() {
  MLACONF_REQUIRE_CUDA();
  const GgmlType t = GgmlType::Q4_K;
  const int64_t T = 3, H = 5, dv = 512, v = 256;
  auto blocks = random_blocks(t, H * v * dv / 256, 77);
  auto W = host_dequant(t, blocks, H * v * dv);
  std::mt19937_64 rng(4);
  auto lat = random_floats(rng, T * H * dv);
  std::vector<double> want(T * H * v, 0.0);
  for (int64_t tt = 0; tt < T; ++tt)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < v; ++r)
        for (int64_t c = 0; c < dv; ++c) want[(tt * H + h) * v + r] += (double)W[(h * v + r) * dv + c] * lat[(tt * H + h) * dv + c];
  auto d_w = cuda::to_device(blocks), d_l = cuda::to_device(lat);
  cuda::DeviceBuffer d_o(T * H * v * 4);
  cuda::apply_wuv(t, d_w.get(), v, dv, d_l.as<float>(), T, H, d_o.as<float>());
  cuda::synchronize();
  EXPECT_LE(nmse(cuda::to_host<float>(d_o, T * H * v), want), 1e-10);
}

// Prefill linear: dequant to fp16, cuBLAS GEMM with fp32 accumulation (activations as fp16 hi + lo).
// Judged against float64 on the fp16-rounded weights and the fp32 inputs: NMSE <= 1e-8.
void prefill_case(GgmlType t, int64_t T, int64_t rows, int64_t cols) {
  MLACONF_REQUIRE_CUDA();
  auto blocks = random_blocks(t, rows * cols / traits(t).block_size, 55);
  auto W = host_dequant(t, blocks, rows * cols);
  std::mt19937_64 rng(6);
  auto x = random_floats(rng, T * cols);
  std::vector<double> want(T * rows, 0.0);
  for (int64_t tt = 0; tt < T; ++tt)
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c)
        acc += (double)cuda::half_bits_to_float_host(cuda::float_to_half_bits(W[r * cols + c])) * x[tt * cols + c];
      want[tt * rows + r] = acc;
    }
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y(T * rows * 4), scratch;
  cuda::linear_prefill(t, d_w.get(), rows, cols, d_x.as<float>(), T, d_y.as<float>(), &scratch);
  cuda::synchronize();
  const double e = nmse(cuda::to_host<float>(d_y, T * rows), want);
  std::printf("  prefill %s T=%lld %lldx%lld: NMSE %.3e\n", type_name(t), (long long)T, (long long)rows, (long long)cols, e);
  EXPECT_LE(e, 1e-8);
}

// The hi+lo variant: judged against float64 on the exact (fp32) weights: NMSE <= 1e-10.
void prefill_x3_case() {
  MLACONF_REQUIRE_CUDA();
  const GgmlType t = GgmlType::Q4_K;
  const int64_t T = 40, rows = 700, cols = 1024;
  auto blocks = random_blocks(t, rows * cols / 256, 56);
  auto W = host_dequant(t, blocks, rows * cols);
  std::mt19937_64 rng(7);
  auto x = random_floats(rng, T * cols);
  std::vector<double> want(T * rows, 0.0);
  for (int64_t tt = 0; tt < T; ++tt)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) want[tt * rows + r] += (double)W[r * cols + c] * x[tt * cols + c];
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y(T * rows * 4), d_z(T * rows * 4), scratch;
  cuda::linear_prefill_x3(t, d_w.get(), rows, cols, d_x.as<float>(), T, d_y.as<float>(), &scratch);
  cuda::linear_prefill_f32(t, d_w.get(), rows, cols, d_x.as<float>(), T, d_z.as<float>(), &scratch);
  cuda::synchronize();
  const double e3 = nmse(cuda::to_host<float>(d_y, T * rows), want), e32 = nmse(cuda::to_host<float>(d_z, T * rows), want);
  std::printf("  prefill x3 NMSE %.3e, f32 NMSE %.3e (exact weights)\n", e3, e32);
  EXPECT_LE(e3, 1e-10);
  EXPECT_LE(e32, 1e-12);
}

void norms_case() {
  MLACONF_REQUIRE_CUDA();
  const int64_t T = 7, D = 1000;
  std::mt19937_64 rng(8);
  auto x = random_floats(rng, T * D, 3.f), w = random_floats(rng, D), b = random_floats(rng, D, 0.1f);
  auto d_x = cuda::to_device(x), d_w = cuda::to_device(w), d_b = cuda::to_device(b);
  cuda::DeviceBuffer d_y(T * D * 4), d_z(T * D * 4);
  cuda::rmsnorm(d_x.as<float>(), d_w.as<float>(), T, D, D, 1e-5f, d_y.as<float>());
  cuda::layernorm(d_x.as<float>(), d_w.as<float>(), d_b.as<float>(), T, D, 1e-6f, d_z.as<float>());
  cuda::synchronize();
  std::vector<double> ry(T * D), rz(T * D);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0, m = 0, v = 0;
    for (int64_t i = 0; i < D; ++i) ss += (double)x[t * D + i] * x[t * D + i], m += x[t * D + i];
    m /= D;
    for (int64_t i = 0; i < D; ++i) v += (x[t * D + i] - m) * (x[t * D + i] - m);
    v /= D;
    for (int64_t i = 0; i < D; ++i) {
      ry[t * D + i] = w[i] * x[t * D + i] / std::sqrt(ss / D + 1e-5);
      rz[t * D + i] = w[i] * (x[t * D + i] - m) / std::sqrt(v + 1e-6) + b[i];
    }
  }
  EXPECT_LE(nmse(cuda::to_host<float>(d_y, T * D), ry), 1e-12) << "rmsnorm";
  EXPECT_LE(nmse(cuda::to_host<float>(d_z, T * D), rz), 1e-12) << "layernorm";
}

void rope_case(bool neox) {
  MLACONF_REQUIRE_CUDA();
  const int64_t T = 5, nv = 3, stride = 256, col0 = 192, dim = 64;
  std::mt19937_64 rng(9);
  auto x = random_floats(rng, T * nv * stride);
  std::vector<int32_t> pos = {0, 1, 17, 4095, 131071};
  const double theta = 1e6;
  auto d_x = cuda::to_device(x), d_p = cuda::to_device(pos);
  cuda::rope(d_x.as<float>(), T, nv, stride, col0, dim, d_p.as<int32_t>(), theta, neox);
  cuda::synchronize();
  auto got = cuda::to_host<float>(d_x, x.size());
  std::vector<double> want(x.begin(), x.end());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < nv; ++v)
      for (int64_t i = 0; i < dim / 2; ++i) {
        const double ang = pos[t] * std::pow(theta, -2.0 * i / dim);
        const int64_t base = (t * nv + v) * stride + col0;
        const int64_t a = base + (neox ? i : 2 * i), b = base + (neox ? i + dim / 2 : 2 * i + 1);
        want[a] = x[a] * std::cos(ang) - x[b] * std::sin(ang);
        want[b] = x[a] * std::sin(ang) + x[b] * std::cos(ang);
      }
  double maxabs = 0;
  for (size_t i = 0; i < want.size(); ++i) maxabs = std::max(maxabs, std::abs(got[i] - want[i]));
  EXPECT_LE(maxabs, 1e-6) << "max-abs error of RoPE (values in [-1,1])";
}

void silu_case() {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(10);
  const int64_t n = 4099;
  auto g = random_floats(rng, n, 8.f), u = random_floats(rng, n);
  auto d_g = cuda::to_device(g), d_u = cuda::to_device(u);
  cuda::DeviceBuffer d_o(n * 4);
  cuda::silu_gate(d_g.as<float>(), d_u.as<float>(), n, d_o.as<float>());
  cuda::synchronize();
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = g[i] / (1 + std::exp(-(double)g[i])) * u[i];
  EXPECT_LE(nmse(cuda::to_host<float>(d_o, n), want), 1e-12);
  EXPECT_EQ(cuda::count_nonfinite(d_o.as<float>(), n), 0);
}

const bool registered = [] {
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0,
                     GgmlType::IQ4_XS, GgmlType::IQ4_NL, GgmlType::F16, GgmlType::BF16, GgmlType::Q2_K, GgmlType::IQ2_XXS})
    register_case("gemv", std::string("gemv(type=") + type_name(t) + ",rows=1000,cols=4096)", [t] { gemv_case(t, 1000, 4096); });
  register_case("gemv", "gemv(type=Q6_K,rows=6144,cols=6144)", [] { gemv_case(GgmlType::Q6_K, 6144, 6144); });
  register_case("gemv", "gemv(type=Q4_K,rows=2048,cols=6144)", [] { gemv_case(GgmlType::Q4_K, 2048, 6144); });
  register_case("gemv", "gemv(type=Q4_K,rows=100,cols=512,x=unaligned)", gemv_unaligned_case);
  register_case("gemv", "gemv_experts(type=Q4_K,pool=6,ids=5|0|3|3,rows=2048,cols=1024,x=shared)",
                [] { gemv_experts_case(GgmlType::Q4_K, 6, {5, 0, 3, 3}, 2048, 1024, true); });
  register_case("gemv", "gemv_experts(type=Q4_K,pool=4,ids=2|1,rows=77,cols=768,x=per_expert)",
                [] { gemv_experts_case(GgmlType::Q4_K, 4, {2, 1}, 77, 768, false); });
  register_case("gemv", "gemv_experts(type=Q6_K,pool=3,ids=2|0,rows=64,cols=512,x=shared)",
                [] { gemv_experts_case(GgmlType::Q6_K, 3, {2, 0}, 64, 512, true); });
  register_case("gemv", "apply_wuv(type=Q4_K,t=3,h=5,dv=512,v=256)", wuv_case);
  register_case("gemm", "linear_prefill(type=Q4_K,t=33,rows=1000,cols=2048)", [] { prefill_case(GgmlType::Q4_K, 33, 1000, 2048); });
  register_case("gemm", "linear_prefill(type=Q5_0,t=7,rows=512,cols=192)", [] { prefill_case(GgmlType::Q5_0, 7, 512, 192); });
  register_case("gemm", "linear_prefill(type=Q4_K,t=40,rows=700,cols=1024,precision=fp16x3|fp32)", prefill_x3_case);
  register_case("ops", "norms(t=7,d=1000,rms_eps=0.00001,ln_eps=0.000001)", norms_case);
  register_case("ops", "rope(style=interleaved,dim=64,col0=192,theta=1e6)", [] { rope_case(false); });
  register_case("ops", "rope(style=neox,dim=64,col0=192,theta=1e6)", [] { rope_case(true); });
  register_case("ops", "silu_gate(n=4099)", silu_case);
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
