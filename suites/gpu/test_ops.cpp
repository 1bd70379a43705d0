// suites/gpu: the fused dequant GEMV (single, grouped experts, per head), the prefill GEMM, norms, RoPE and
// the SiLU gate, each against the reference function the model runs (ref::linear, apply_v_up, rmsnorm,
// layernorm, rope_inplace, silu_gate) on the weights the reference dequantizer gives, judged by the
// fixtures judge (op_check.h): activation class at f32, the kernels' arithmetic (fp32 accumulation of
// exact inputs; the fp16 prefill GEMM is given its fp16-rounded weights, as it sees them).
//
// Off-alignment sizes: the generic GEMV takes 8 rows per CTA (one warp a row, lanes over columns), the
// Q4_K GEMV 8 rows per CTA and G groups of 8 lanes over 64-value pieces of the rows (G from the shape; its
// v1 took 8, 16 or 32 rows per CTA), the float GEMV (F32 / F16 / BF16) 1, 2 or 4 rows per CTA with a row's
// 4- or 8-value chunks over 256 threads; rows and blocks run just below and above those multiples, plus primes.
// RMSNorm runs one CTA per row with one 4-value chunk per thread (up to 1024), LayerNorm 128 threads per
// row; RoPE and SiLU a 256-thread grid over elements (SiLU 4 per thread).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <tuple>
#include <random>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/faults.h"
#include "reference/mla.h"
#include "reference/ops.h"
#include "suites/gpu/gpu_test_util.h"
#include "suites/gpu/host_ref.h"
#include "suites/gpu/op_check.h"

namespace mlaconf::gputest {
namespace {

using test::CaseName;

std::vector<float> random_floats(std::mt19937_64& rng, size_t n, float amp = 1.f) {
  std::uniform_real_distribution<float> u(-amp, amp);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// y = W x for a rows x cols matrix of type t (x at an offset of x_off floats: off 16 bytes = the generic
// kernel). Expected: ref::linear on the reference's dequantized W. Returns the check (not yet asserted).
OpCheck gemv_check(GgmlType t, int64_t rows, int64_t cols, int64_t x_off, bool timed, const std::string& dir = "") {
  OpCheck chk(dir);
  const auto blocks = random_weights(t, rows * cols, 31 + (uint32_t)t + (uint32_t)rows);
  std::mt19937_64 rng(3 + rows + cols);
  const auto x = random_floats(rng, cols + x_off);
  const MatD W = mat_of(ref_dequant(t, blocks, rows * cols), rows, cols);
  const MatD want = ref::linear<double>(mat_of(x, 1, cols, x_off), W);
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y(rows * 4);
  cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>() + x_off, d_y.as<float>());
  cuda::synchronize();
  if (timed) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>() + x_off, d_y.as<float>());
    cuda::synchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 10;
    std::printf("  gemv %s %lldx%lld: %.3f ms (%.1f GB/s of weights)\n", type_name(t), (long long)rows, (long long)cols, ms,
                blocks.size() / ms / 1e6);
  }
  chk.input("w_blocks", [blocks, rows] { return u8_array({rows, (int64_t)blocks.size() / rows}, blocks); });
  chk.input("x", [x] { return f32_array({(int64_t)x.size()}, x); });
  chk.tensor("y", "f32", {rows}, flat(want), as_f64(cuda::to_host<float>(d_y, rows)));
  return chk;
}

void gemv_case(GgmlType t, int64_t rows, int64_t cols, int64_t x_off = 0, bool timed = false) {
  MLACONF_REQUIRE_CUDA();
  OpCheck chk = gemv_check(t, rows, cols, x_off, timed);
  expect_pass(chk);
}

// All used experts of a token in one launch: y_j = W[ids[j]] x_j, experts picked out of order from a
// pool (shared x: one x for all, as the routed experts of one token).
OpCheck gemv_experts_check(GgmlType t, int64_t pool, const std::vector<int32_t>& ids, int64_t rows, int64_t cols, bool shared_x,
                           const std::string& dir = "") {
  OpCheck chk(dir);
  const int64_t n = (int64_t)ids.size();
  const auto blocks = random_weights(t, pool * rows * cols, 57 + (uint32_t)t + (uint32_t)rows);
  const std::vector<float> W = ref_dequant(t, blocks, pool * rows * cols);
  std::mt19937_64 rng(4 + rows);
  const auto x = random_floats(rng, shared_x ? cols : n * cols);
  std::vector<double> want;
  for (int64_t j = 0; j < n; ++j) {
    const MatD y = ref::linear<double>(mat_of(x, 1, cols, shared_x ? 0 : j * cols), mat_of(W, rows, cols, ids[j] * rows * cols));
    want.insert(want.end(), y.data(), y.data() + y.size());
  }
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x), d_ids = cuda::to_device(ids);
  cuda::DeviceBuffer d_y(n * rows * 4);
  cuda::gemv_experts(t, d_w.get(), rows * row_bytes(t, cols), d_ids.as<int32_t>(), n, rows, cols, d_x.as<float>(),
                     shared_x ? 0 : cols, d_y.as<float>(), rows);
  cuda::synchronize();
  chk.input("w_blocks", [blocks, pool, rows] { return u8_array({pool, rows, (int64_t)blocks.size() / (pool * rows)}, blocks); });
  chk.input("ids", [ids] { return i32_array({(int64_t)ids.size()}, ids); });
  chk.input("x", [x] { return f32_array({(int64_t)x.size()}, x); });
  chk.tensor("y", "f32", {n, rows}, want, as_f64(cuda::to_host<float>(d_y, n * rows)));
  return chk;
}

void gemv_experts_case(GgmlType t, int64_t pool, std::vector<int32_t> ids, int64_t rows, int64_t cols, bool shared_x) {
  MLACONF_REQUIRE_CUDA();
  OpCheck chk = gemv_experts_check(t, pool, ids, rows, cols, shared_x);
  expect_pass(chk);
}

// A batch of B x through the float GEMV (F32 / F16 / BF16): on one matrix (ids empty: the router of a
// batched decode step) or on the matrices ids picks from a pool (gemv_experts), x rows of stride
// cols + x_pad (x_pad 1: misaligned rows, the kernel's scalar-load variant). Judged against ref::linear
// per entry, and each entry's bits against the same x through the GEMV alone (batch invariance).
void gemv_float_batch_case(GgmlType t, int64_t rows, int64_t cols, int64_t B, const std::vector<int32_t>& ids, int64_t x_pad) {
  MLACONF_REQUIRE_CUDA();
  const int64_t pool = ids.empty() ? 1 : *std::max_element(ids.begin(), ids.end()) + 1, xs = cols + x_pad;
  const auto blocks = random_weights(t, pool * rows * cols, 91 + (uint32_t)t + (uint32_t)rows);
  const std::vector<float> W = ref_dequant(t, blocks, pool * rows * cols);
  std::mt19937_64 rng(12 + B + cols);
  const auto x = random_floats(rng, B * xs);
  const int64_t mb = rows * row_bytes(t, cols);
  std::vector<double> want;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t m = ids.empty() ? 0 : ids[b];
    const MatD y = ref::linear<double>(mat_of(x, 1, cols, b * xs), mat_of(W, rows, cols, m * rows * cols));
    want.insert(want.end(), y.data(), y.data() + y.size());
  }
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y(B * rows * 4), d_1(rows * 4);
  if (ids.empty()) {
    cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>(), d_y.as<float>(), B, 0, xs, rows);
  } else {
    auto d_ids = cuda::to_device(ids);
    cuda::gemv_experts(t, d_w.get(), mb, d_ids.as<int32_t>(), B, rows, cols, d_x.as<float>(), xs, d_y.as<float>(), rows);
  }
  const auto got = cuda::to_host<float>(d_y, B * rows);
  std::vector<float> alone(B * rows);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t m = ids.empty() ? 0 : ids[b];
    cuda::gemv(t, d_w.as<uint8_t>() + m * mb, rows, cols, d_x.as<float>() + b * xs, d_1.as<float>());
    const auto one = cuda::to_host<float>(d_1, rows);
    std::copy(one.begin(), one.end(), alone.begin() + b * rows);
  }
  OpCheck chk;
  chk.input("w_blocks", [blocks, pool, rows] { return u8_array({pool, rows, (int64_t)blocks.size() / (pool * rows)}, blocks); });
  if (!ids.empty()) chk.input("ids", [ids] { return i32_array({(int64_t)ids.size()}, ids); });
  chk.input("x", [x, B, xs] { return f32_array({B, xs}, x); });
  chk.tensor("y", "f32", {B, rows}, want, as_f64(got));
  chk.bits("y_vs_alone", {B, rows}, alone, got);
  expect_pass(chk);
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "|" : "") + std::to_string(ids[i]);
  return s;
}

// Per-head W_UV: out[t,h] = W_h latent[t,h] for a Q4_K attn_v_b {d_v, v, H}: ref::apply_v_up per token.
OpCheck wuv_check(int64_t T, int64_t H, int64_t dv, int64_t v, const std::string& dir = "") {
  const GgmlType t = GgmlType::Q4_K;
  const auto blocks = random_weights(t, H * v * dv, 77);
  const std::vector<float> W = ref_dequant(t, blocks, H * v * dv);
  std::vector<MatD> vb;
  for (int64_t h = 0; h < H; ++h) vb.push_back(mat_of(W, v, dv, h * v * dv));
  std::mt19937_64 rng(4);
  const auto lat = random_floats(rng, T * H * dv);
  std::vector<double> want;
  for (int64_t tt = 0; tt < T; ++tt) {
    const MatD o = ref::apply_v_up<double>(mat_of(lat, H, dv, tt * H * dv), vb);
    want.insert(want.end(), o.data(), o.data() + o.size());
  }
  auto d_w = cuda::to_device(blocks), d_l = cuda::to_device(lat);
  cuda::DeviceBuffer d_o(T * H * v * 4);
  cuda::apply_wuv(t, d_w.get(), v, dv, d_l.as<float>(), T, H, d_o.as<float>());
  cuda::synchronize();
  OpCheck chk(dir);
  chk.input("w_blocks", [blocks, H, v] { return u8_array({H, v, (int64_t)blocks.size() / (H * v)}, blocks); });
  chk.input("latent", [lat, T, H, dv] { return f32_array({T, H, dv}, lat); });
  chk.tensor("out", "f32", {T, H, v}, want, as_f64(cuda::to_host<float>(d_o, T * H * v)));
  return chk;
}

void wuv_case(int64_t T, int64_t H, int64_t dv, int64_t v) {
  MLACONF_REQUIRE_CUDA();
  OpCheck chk = wuv_check(T, H, dv, v);
  expect_pass(chk);
}

enum class Prefill { F16Weights, X3, F32 };
const char* prefill_name(Prefill p) { return p == Prefill::F16Weights ? "fp16" : p == Prefill::X3 ? "fp16x3" : "fp32"; }

// Prefill linear. fp16: dequant to fp16, cuBLAS GEMM with fp32 accumulation (activations as fp16 hi + lo),
// expected from the fp16-rounded weights it multiplies; fp16x3 (hi+lo weights too) and fp32: from the
// exact weights.
void prefill_case(GgmlType t, Prefill kind, int64_t T, int64_t rows, int64_t cols) {
  MLACONF_REQUIRE_CUDA();
  const auto blocks = random_weights(t, rows * cols, 55 + (uint32_t)rows);
  std::vector<float> W = ref_dequant(t, blocks, rows * cols);
  if (kind == Prefill::F16Weights)
    for (auto& w : W) w = cuda::half_bits_to_float_host(cuda::float_to_half_bits(w));
  std::mt19937_64 rng(6 + T);
  const auto x = random_floats(rng, T * cols);
  const MatD want = ref::linear<double>(mat_of(x, T, cols), mat_of(W, rows, cols));
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y(T * rows * 4), scratch;
  if (kind == Prefill::F16Weights) cuda::linear_prefill(t, d_w.get(), rows, cols, d_x.as<float>(), T, d_y.as<float>(), &scratch);
  if (kind == Prefill::X3) cuda::linear_prefill_x3(t, d_w.get(), rows, cols, d_x.as<float>(), T, d_y.as<float>(), &scratch);
  if (kind == Prefill::F32) cuda::linear_prefill_f32(t, d_w.get(), rows, cols, d_x.as<float>(), T, d_y.as<float>(), &scratch);
  cuda::synchronize();
  OpCheck chk;
  chk.input("w_blocks", [&] { return u8_array({rows, (int64_t)blocks.size() / rows}, blocks); });
  chk.input("x", [&] { return f32_array({T, cols}, x); });
  chk.tensor("y", "f32", {T, rows}, flat(want), as_f64(cuda::to_host<float>(d_y, T * rows)));
  expect_pass(chk);
}

// RMSNorm (rows of stride ld >= D) and LayerNorm of T rows of D values.
void norms_case(int64_t T, int64_t D, int64_t ld) {
  MLACONF_REQUIRE_CUDA();
  const float rms_eps = 1e-5f, ln_eps = 1e-6f;
  std::mt19937_64 rng(8 + D);
  const auto x = random_floats(rng, T * ld, 3.f), w = random_floats(rng, D), b = random_floats(rng, D, 0.1f);
  auto d_x = cuda::to_device(x), d_w = cuda::to_device(w), d_b = cuda::to_device(b);
  cuda::DeviceBuffer d_y(T * ld * 4), d_z(T * D * 4);
  cuda::rmsnorm(d_x.as<float>(), d_w.as<float>(), T, D, ld, rms_eps, d_y.as<float>());
  cuda::synchronize();
  MatD xs(T, D);  // the D values of each row (stride ld)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D; ++i) xs(t, i) = x[t * ld + i];
  const auto y = cuda::to_host<float>(d_y, T * ld);
  std::vector<double> ys(T * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D; ++i) ys[t * D + i] = y[t * ld + i];
  OpCheck chk;
  chk.input("x", [&] { return f32_array({T, ld}, x); });
  chk.input("w", [&] { return f32_array({D}, w); });
  chk.input("b", [&] { return f32_array({D}, b); });
  chk.tensor("rmsnorm", "f32", {T, D}, flat(ref::rmsnorm<double>(xs, vec_of(w), (double)rms_eps)), ys);
  if (ld == D) {  // LayerNorm has no row stride
    cuda::layernorm(d_x.as<float>(), d_w.as<float>(), d_b.as<float>(), T, D, ln_eps, d_z.as<float>());
    cuda::synchronize();
    chk.tensor("layernorm", "f32", {T, D}, flat(ref::layernorm<double>(xs, vec_of(w), vec_of(b), (double)ln_eps)),
               as_f64(cuda::to_host<float>(d_z, T * D)));
  }
  expect_pass(chk);
}

// Every norm kernel at input magnitudes where eps matters (issue 37, "scale": a wrong eps in the latent
// norms passed every GPU suite, whose inputs of amplitude ~3 make eps invisible). Rows of amplitude `amp`
// (1e-3..1e-4: mean(x²) 3e-7..3e-9, at or below eps): rmsnorm (row stride ld, the kv_a norm's 512 of 576),
// add_rmsnorm, layernorm and layernorm_rope at position 0 (no rotation: the indexer k LayerNorm), each at
// the eps the model gives it (rms 1e-5 = the tiny model's GGUF value, and 1e-6 = GLM-5's; ln 1e-6), against
// the reference function with that eps; and, in the same case, the reference with a wrong eps (the other
// one, and none) must FAIL the same judge on the same output: the check has teeth at this magnitude.
void norms_small_case(int64_t T, int64_t D, int64_t ld, float amp, float rms_eps) {
  MLACONF_REQUIRE_CUDA();
  const float ln_eps = 1e-6f, wrong_rms = rms_eps == 1e-5f ? 1e-6f : 1e-5f;
  std::mt19937_64 rng(31 + D + T);
  const auto x = random_floats(rng, T * ld, amp), dl = random_floats(rng, T * D, amp), w = random_floats(rng, D),
             b = random_floats(rng, D, 0.1f);
  MatD xs(T, D);
  std::vector<float> sum(T * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D; ++i) xs(t, i) = x[t * ld + i], sum[t * D + i] = x[t * ld + i] + dl[t * D + i];
  std::vector<float> xd(T * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D; ++i) xd[t * D + i] = x[t * ld + i];
  auto d_x = cuda::to_device(x), d_xd = cuda::to_device(xd), d_w = cuda::to_device(w), d_b = cuda::to_device(b);
  auto d_h = cuda::to_device(xd), d_d = cuda::to_device(dl);
  const std::vector<int32_t> pos(T, 0);
  auto d_p = cuda::to_device(pos);
  cuda::DeviceBuffer d_y(T * ld * 4), d_ya(T * D * 4), d_z(T * D * 4), d_zr(T * D * 4);
  cuda::rmsnorm(d_x.as<float>(), d_w.as<float>(), T, D, ld, rms_eps, d_y.as<float>());
  cuda::add_rmsnorm(d_h.as<float>(), d_d.as<float>(), d_w.as<float>(), T, D, rms_eps, d_ya.as<float>());
  cuda::layernorm(d_xd.as<float>(), d_w.as<float>(), d_b.as<float>(), T, D, ln_eps, d_z.as<float>());
  cuda::layernorm_rope(d_xd.as<float>(), d_w.as<float>(), d_b.as<float>(), T, D, ln_eps, d_p.as<int32_t>(), std::min<int64_t>(D, 64) & ~1,
                       1e6, false, d_zr.as<float>());
  cuda::synchronize();
  const auto y = cuda::to_host<float>(d_y, T * ld);
  std::vector<double> ys(T * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D; ++i) ys[t * D + i] = y[t * ld + i];
  const auto ya = as_f64(cuda::to_host<float>(d_ya, T * D)), z = as_f64(cuda::to_host<float>(d_z, T * D)),
             zr = as_f64(cuda::to_host<float>(d_zr, T * D));
  const MatD ss = mat_of(sum, T, D);
  auto rms = [&](const MatD& m, double e) { return flat(ref::rmsnorm<double>(m, vec_of(w), e)); };
  auto ln = [&](double e) { return flat(ref::layernorm<double>(xs, vec_of(w), vec_of(b), e)); };
  OpCheck chk;
  chk.input("x", [&] { return f32_array({T, ld}, x); });
  chk.input("delta", [&] { return f32_array({T, D}, dl); });
  chk.input("w", [&] { return f32_array({D}, w); });
  chk.input("b", [&] { return f32_array({D}, b); });
  chk.tensor("rmsnorm", "f32", {T, D}, rms(xs, rms_eps), ys);
  chk.tensor("add_rmsnorm", "f32", {T, D}, rms(ss, rms_eps), ya);
  chk.tensor("layernorm", "f32", {T, D}, ln(ln_eps), z);
  chk.tensor("layernorm_rope_pos0", "f32", {T, D}, ln(ln_eps), zr);
  expect_pass(chk);
  // The same outputs against a wrong eps: every one must fail (in a scratch folder: expected failures).
  const std::string dir = testing::TempDir() + "/mlaconf_repro_norm_eps";
  for (double bad : {(double)wrong_rms, 0.0}) {
    OpCheck w1(dir), w2(dir);
    EXPECT_FALSE(w1.tensor("rmsnorm", "f32", {T, D}, rms(xs, bad), ys)) << "rmsnorm judged against eps " << bad << " must fail";
    EXPECT_FALSE(w2.tensor("add_rmsnorm", "f32", {T, D}, rms(ss, bad), ya)) << "add_rmsnorm against eps " << bad;
  }
  for (double bad : {1e-5, 0.0}) {
    OpCheck w1(dir), w2(dir);
    EXPECT_FALSE(w1.tensor("layernorm", "f32", {T, D}, ln(bad), z)) << "layernorm judged against eps " << bad << " must fail";
    EXPECT_FALSE(w2.tensor("layernorm_rope_pos0", "f32", {T, D}, ln(bad), zr)) << "layernorm_rope against eps " << bad;
  }
}

// The residual add fused into RMSNorm (add_rmsnorm): h += delta, y = rmsnorm(h). Judged against the
// reference on the float sums, bit for bit against add_inplace then rmsnorm, and each row's bits
// against the same row normalized alone (batch invariance).
void add_rmsnorm_case(int64_t T, int64_t D) {
  MLACONF_REQUIRE_CUDA();
  const float eps = 1e-5f;
  std::mt19937_64 rng(18 + D + T);
  const auto h = random_floats(rng, T * D, 3.f), dl = random_floats(rng, T * D), w = random_floats(rng, D);
  std::vector<float> sum(T * D);
  for (int64_t i = 0; i < T * D; ++i) sum[i] = h[i] + dl[i];
  auto d_h = cuda::to_device(h), d_d = cuda::to_device(dl), d_w = cuda::to_device(w), d_h2 = cuda::to_device(h);
  cuda::DeviceBuffer d_y(T * D * 4), d_y2(T * D * 4), d_y1(D * 4);
  cuda::add_rmsnorm(d_h.as<float>(), d_d.as<float>(), d_w.as<float>(), T, D, eps, d_y.as<float>());
  cuda::add_inplace(d_h2.as<float>(), d_d.as<float>(), T * D);
  cuda::rmsnorm(d_h2.as<float>(), d_w.as<float>(), T, D, D, eps, d_y2.as<float>());
  const auto y = cuda::to_host<float>(d_y, T * D);
  std::vector<float> alone(T * D);
  for (int64_t t = 0; t < T; ++t) {
    cuda::rmsnorm(d_h2.as<float>() + t * D, d_w.as<float>(), 1, D, D, eps, d_y1.as<float>());
    const auto one = cuda::to_host<float>(d_y1, D);
    std::copy(one.begin(), one.end(), alone.begin() + t * D);
  }
  OpCheck chk;
  chk.input("h", [&] { return f32_array({T, D}, h); });
  chk.input("delta", [&] { return f32_array({T, D}, dl); });
  chk.input("w", [&] { return f32_array({D}, w); });
  chk.tensor("y", "f32", {T, D}, flat(ref::rmsnorm<double>(mat_of(sum, T, D), vec_of(w), (double)eps)), as_f64(y));
  chk.bits("h_sum", {T, D}, sum, cuda::to_host<float>(d_h, T * D));
  chk.bits("y_vs_add_then_rmsnorm", {T, D}, cuda::to_host<float>(d_y2, T * D), y);
  chk.bits("y_vs_alone", {T, D}, alone, y);
  // Row 0 again from a misaligned copy (scalar loads): the same bits as the aligned row.
  std::vector<float> row0(D + 1);
  std::copy(sum.begin(), sum.begin() + D, row0.begin() + 1);
  auto d_r = cuda::to_device(row0);
  cuda::DeviceBuffer d_ym((D + 1) * 4);
  cuda::rmsnorm(d_r.as<float>() + 1, d_w.as<float>(), 1, D, D, eps, d_ym.as<float>() + 1);
  const auto ym = cuda::to_host<float>(d_ym, D + 1);
  chk.bits("y_misaligned_row", {D}, std::vector<float>(alone.begin(), alone.begin() + D), std::vector<float>(ym.begin() + 1, ym.end()));
  expect_pass(chk);
}

// The MoE's row moves and weighted combine: copies and an fmaf chain in slot order, so exact against
// the host (std::fma rounds as fmaf does): gather_rows / scatter_rows of n rows of cols values (strides
// cols + pad: pad 1 takes the scalar variant), weighted_combine with the shared expert added and the
// residual updated in the same launch.
void moe_moves_case(int64_t T, int64_t k, int64_t E, int64_t pad) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(20 + T + E);
  const int64_t n = T * k, ld = E + pad;
  const auto src = random_floats(rng, T * ld), xs = random_floats(rng, n * E), wts = random_floats(rng, n),
             sh = random_floats(rng, T * E), res = random_floats(rng, T * E);
  std::vector<int32_t> tok(n), slot(n);
  for (int64_t j = 0; j < n; ++j) tok[j] = (int32_t)(j / k), slot[j] = (int32_t)((j * 7 + 3) % n);
  std::vector<float> gathered(n * ld, 0.f), scattered(n * ld, 0.f), out(T * E), res_want(res);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < E; ++c) {
      gathered[j * ld + c] = src[tok[j] * ld + c];
      scattered[slot[j] * ld + c] = gathered[j * ld + c];
    }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < E; ++c) {
      float acc = sh[t * E + c];
      for (int64_t j = 0; j < k; ++j) acc = std::fma(wts[t * k + j], xs[(t * k + j) * E + c], acc);
      out[t * E + c] = acc;
      res_want[t * E + c] += acc;
    }
  auto d_src = cuda::to_device(src), d_tok = cuda::to_device(tok), d_slot = cuda::to_device(slot), d_xs = cuda::to_device(xs),
       d_w = cuda::to_device(wts), d_sh = cuda::to_device(sh), d_res = cuda::to_device(res);
  auto d_g = cuda::to_device(std::vector<float>(n * ld, 0.f)), d_s = cuda::to_device(std::vector<float>(n * ld, 0.f));
  cuda::DeviceBuffer d_o(T * E * 4);
  cuda::gather_rows(d_src.as<float>(), ld, d_tok.as<int32_t>(), n, E, d_g.as<float>(), ld);
  cuda::scatter_rows(d_g.as<float>(), ld, d_slot.as<int32_t>(), n, E, d_s.as<float>(), ld);
  cuda::weighted_combine(d_xs.as<float>(), d_w.as<float>(), T, k, E, d_sh.as<float>(), d_o.as<float>(), d_res.as<float>());
  OpCheck chk;
  chk.input("src", [&] { return f32_array({T, ld}, src); });
  chk.bits("gathered", {n, ld}, gathered, cuda::to_host<float>(d_g, n * ld));
  chk.bits("scattered", {n, ld}, scattered, cuda::to_host<float>(d_s, n * ld));
  chk.bits("combined", {T, E}, out, cuda::to_host<float>(d_o, T * E));
  chk.bits("residual", {T, E}, res_want, cuda::to_host<float>(d_res, T * E));
  expect_pass(chk);
}

// In-place RoPE of x [T, n_vec, stride], values [col0, col0 + dim) of each vector.
void rope_case(bool neox, int64_t T, int64_t nv, int64_t stride, int64_t col0, int64_t dim) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(9 + dim);
  const auto x = random_floats(rng, T * nv * stride);
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = (int32_t)((t * 4099 + t * t * 17) % 131072);
  const double theta = 1e6;
  auto d_x = cuda::to_device(x), d_p = cuda::to_device(pos);
  cuda::rope(d_x.as<float>(), T, nv, stride, col0, dim, d_p.as<int32_t>(), theta, neox);
  cuda::synchronize();
  MatD want = mat_of(x, T * nv, stride);
  std::vector<int64_t> row_pos(T * nv);
  for (int64_t r = 0; r < T * nv; ++r) row_pos[r] = pos[r / nv];
  ref::RopeParams rp;
  rp.dim = dim, rp.theta = theta;
  ref::rope_inplace<double>(want, col0, row_pos.data(), ref::rope_inv_freq(rp), neox ? ref::RopeStyle::NeoX : ref::RopeStyle::Interleaved);
  OpCheck chk;
  chk.input("x", [&] { return f32_array({T, nv, stride}, x); });
  chk.input("pos", [&] { return i32_array({T}, pos); });
  chk.tensor("x_roped", "f32", {T, nv, stride}, flat(want), as_f64(cuda::to_host<float>(d_x, x.size())));
  expect_pass(chk);
}

// layernorm_rope (the indexer key's layernorm, RoPE and scatter in one launch) against the three launches it
// replaces, bit for bit: y and the scattered rows (idx a permutation into a larger table, other rows untouched).
void layernorm_rope_case(bool neox, int64_t T, int64_t D, int64_t dim) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(11 + D + dim);
  const auto x = random_floats(rng, T * D, 3.f), w = random_floats(rng, D), b = random_floats(rng, D);
  std::vector<int32_t> pos(T), idx(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = (int32_t)((t * 4099 + t * t * 17 + 32767) % 131072), idx[t] = (int32_t)((T + 2 - t) * 3);
  const int64_t rows = 3 * (T + 3);
  const double theta = 1e6;
  const float eps = 1e-6f;
  auto d_x = cuda::to_device(x), d_w = cuda::to_device(w), d_b = cuda::to_device(b);
  auto d_p = cuda::to_device(pos), d_i = cuda::to_device(idx);
  cuda::DeviceBuffer y0(T * D * 4), y1(T * D * 4), dst0(rows * D * 4), dst1(rows * D * 4);
  dst0.fill(0x7F), dst1.fill(0x7F);
  cuda::layernorm(d_x.as<float>(), d_w.as<float>(), d_b.as<float>(), T, D, eps, y0.as<float>());
  cuda::rope(y0.as<float>(), T, 1, D, 0, dim, d_p.as<int32_t>(), theta, neox);
  cuda::scatter_rows(y0.as<float>(), D, d_i.as<int32_t>(), T, D, dst0.as<float>(), D);
  cuda::layernorm_rope(d_x.as<float>(), d_w.as<float>(), d_b.as<float>(), T, D, eps, d_p.as<int32_t>(), dim, theta, neox,
                       y1.as<float>(), d_i.as<int32_t>(), dst1.as<float>(), D);
  cuda::synchronize();
  OpCheck chk;
  chk.input("x", [&] { return f32_array({T, D}, x); });
  chk.bits("y", {T, D}, cuda::to_host<float>(y0, T * D), cuda::to_host<float>(y1, T * D));
  chk.bits("scattered", {rows, D}, cuda::to_host<float>(dst0, rows * D), cuda::to_host<float>(dst1, rows * D));
  expect_pass(chk);
}

void silu_case(int64_t n) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(10 + n);
  const auto g = random_floats(rng, n, 8.f), u = random_floats(rng, n);
  auto d_g = cuda::to_device(g), d_u = cuda::to_device(u);
  cuda::DeviceBuffer d_o(n * 4);
  cuda::silu_gate(d_g.as<float>(), d_u.as<float>(), n, d_o.as<float>());
  cuda::synchronize();
  OpCheck chk;
  chk.input("gate", [&] { return f32_array({n}, g); });
  chk.input("up", [&] { return f32_array({n}, u); });
  chk.tensor("out", "f32", {n}, flat(ref::silu_gate<double>(mat_of(g, 1, n), mat_of(u, 1, n))),
             as_f64(cuda::to_host<float>(d_o, n)));
  expect_pass(chk);
}

// Negative control of the fault "gemv-drop-tail" (the GEMV grid drops the last n_rows % 8 rows), one
// case per kernel path, each with n_rows % 8 != 0: a single GEMV (block kernel, Q8_0, 1001 rows; the
// float kernel, F32, 257 rows), a grouped expert GEMV (Q4_K kernel, 77 rows per expert) and the per-head
// W_UV (the Q4_K kernel with a matrix per head, b % H, 129 rows per head); each must fail, and the same
// op with n_rows % 8 == 0 must pass (the fault drops nothing there). The failing check writes its reproducer (into a temporary folder: an expected failure).
void drop_tail_control_case(const std::string& op) {
  MLACONF_REQUIRE_CUDA();
  const std::string dir = testing::TempDir() + "/mlaconf_repro_drop_tail";
  cuda::ScopedFault f(cuda::Fault::GemvDropTail);
  const auto run = [&](bool aligned) {
    if (op == "gemv") return gemv_check(GgmlType::Q8_0, aligned ? 1000 : 1001, 768, 0, false, dir);
    if (op == "gemv_float") return gemv_check(GgmlType::F32, aligned ? 256 : 257, 6144, 0, false, dir);
    if (op == "gemv_experts") return gemv_experts_check(GgmlType::Q4_K, 4, {2, 1}, aligned ? 80 : 77, 768, false, dir);
    return wuv_check(2, 7, 256, aligned ? 128 : 129, dir);
  };
  OpCheck off = run(false), on = run(true);
  std::printf("%s%s", off.summary().c_str(), on.summary().c_str());
  EXPECT_FALSE(off.pass()) << op << " with n_rows % 8 != 0 must fail under gemv-drop-tail";
  EXPECT_TRUE(on.pass()) << op << " with n_rows % 8 == 0: the fault drops nothing";
  const std::string path = off.write_repro();
  EXPECT_TRUE(std::filesystem::exists(path)) << path;
  std::printf("  reproducer of the caught fault: %s\n", path.c_str());
}

const bool registered = [] {
  const auto gemv_name = [](GgmlType t, int64_t rows, int64_t cols) {
    return CaseName("gemv").p("type", type_name(t)).p("rows", rows).p("cols", cols).str();
  };
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0,
                     GgmlType::IQ4_XS, GgmlType::IQ4_NL, GgmlType::F16, GgmlType::BF16, GgmlType::Q2_K, GgmlType::IQ2_XXS})
    register_case("gemv", gemv_name(t, 1000, 4096), [t] { gemv_case(t, 1000, 4096, 0, true); });
  register_case("gemv", gemv_name(GgmlType::Q6_K, 6144, 6144), [] { gemv_case(GgmlType::Q6_K, 6144, 6144, 0, true); });
  register_case("gemv", gemv_name(GgmlType::Q4_K, 2048, 6144), [] { gemv_case(GgmlType::Q4_K, 2048, 6144, 0, true); });
  register_case("gemv", "gemv(type=Q4_K,rows=100,cols=512,x=unaligned)", [] { gemv_case(GgmlType::Q4_K, 100, 512, 1); });
  // Off alignment: rows around every multiple of the CTA's 8 / 16 / 32 rows, plus a prime, for the Q4_K
  // kernel, the generic kernel on 256-value (Q6_K), 32-value (Q8_0) and 1-value (F16) blocks.
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::F16})
    for (int64_t rows : {1, 7, 9, 15, 17, 31, 33, 63, 65, 127, 129, 255, 257, 1009})
      register_case("gemv", gemv_name(t, rows, 768), [t, rows] { gemv_case(t, rows, 768); });
  // Columns: block counts around the Q4_K kernel's groups per CTA (v1: 32 / 16 / 8 threads per row) and
  // the generic kernel's 32 lanes, plus a prime.
  for (int64_t nb : {1, 7, 9, 31, 33, 13})
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K}) register_case("gemv", gemv_name(t, 33, nb * 256), [t, nb] { gemv_case(t, 33, nb * 256); });
  for (int64_t nb : {1, 7, 9, 31, 33, 127, 129, 13})
    register_case("gemv", gemv_name(GgmlType::Q8_0, 33, nb * 32), [nb] { gemv_case(GgmlType::Q8_0, 33, nb * 32); });
  for (int64_t cols : {1, 31, 33, 255, 257, 1021})
    register_case("gemv", gemv_name(GgmlType::F16, 17, cols), [cols] { gemv_case(GgmlType::F16, 17, cols); });
  // Row counts where the Q4_K kernel's CTA shape changes (v1: 16- and 32-row CTAs; v2: G from the shape).
  for (int64_t rows : {4223, 4225, 8447, 8449})
    register_case("gemv", gemv_name(GgmlType::Q4_K, rows, 512), [rows] { gemv_case(GgmlType::Q4_K, rows, 512); });

  // The float GEMV (gemv_float.cu): F32 (the router, 256 x 6144 in GLM-5) and F16 / BF16; columns
  // around its 4- / 8-value chunks and 256-thread column split, rows around its 1 / 2 / 4 rows per CTA.
  for (int64_t cols : {1, 3, 5, 1021, 1024, 1027, 6144, 6147})
    register_case("gemv", gemv_name(GgmlType::F32, 7, cols), [cols] { gemv_case(GgmlType::F32, 7, cols); });
  for (int64_t rows : {1, 3, 255, 257, 263, 1025})
    register_case("gemv", gemv_name(GgmlType::F32, rows, 6144), [rows] { gemv_case(GgmlType::F32, rows, 6144); });
  register_case("gemv", "gemv(type=F32,rows=256,cols=6144,x=unaligned)", [] { gemv_case(GgmlType::F32, 256, 6144, 1); });
  register_case("gemv", "gemv(type=BF16,rows=33,cols=1029,x=unaligned)", [] { gemv_case(GgmlType::BF16, 33, 1029, 1); });
  register_case("gemv", gemv_name(GgmlType::F32, 256, 6144), [] { gemv_case(GgmlType::F32, 256, 6144, 0, true); });
  {
    struct Fb {
      GgmlType t;
      int64_t rows, cols, B;
      std::vector<int32_t> ids;
      int64_t x_pad;
    };
    std::vector<Fb> fbs;
    for (int64_t B : {1, 3, 8, 17}) fbs.push_back({GgmlType::F32, 256, 6144, B, {}, 0});
    fbs.push_back({GgmlType::F32, 257, 1027, 17, {}, 1});
    fbs.push_back({GgmlType::F32, 257, 1028, 17, {}, 1});  // entry 0 alone: 16-byte loads; in the batch: scalar
    fbs.push_back({GgmlType::F16, 65, 1032, 8, {}, 0});
    fbs.push_back({GgmlType::BF16, 63, 776, 3, {}, 1});
    fbs.push_back({GgmlType::F32, 33, 768, 8, {3, 0, 3, 1, 2, 2, 0, 3}, 0});
    fbs.push_back({GgmlType::F16, 9, 1001, 3, {1, 1, 0}, 1});
    for (const Fb& f : fbs)
      register_case("gemv", CaseName("gemv_float_batch").p("type", type_name(f.t)).p("rows", f.rows).p("cols", f.cols).p("b", f.B)
                                .p("ids", f.ids.empty() ? std::string("none") : ids_text(f.ids)).p("x_pad", f.x_pad).str(),
                    [f] { gemv_float_batch_case(f.t, f.rows, f.cols, f.B, f.ids, f.x_pad); });
  }

  const auto experts_name = [](GgmlType t, int64_t pool, const std::vector<int32_t>& ids, int64_t rows, int64_t cols, bool shared) {
    return CaseName("gemv_experts").p("type", type_name(t)).p("pool", pool).p("ids", ids_text(ids)).p("rows", rows).p("cols", cols)
        .p("x", shared ? "shared" : "per_expert").str();
  };
  struct Ex {
    GgmlType t;
    int64_t pool;
    std::vector<int32_t> ids;
    int64_t rows, cols;
    bool shared;
  };
  for (const Ex& e : {Ex{GgmlType::Q4_K, 6, {5, 0, 3, 3}, 2048, 1024, true}, Ex{GgmlType::Q4_K, 4, {2, 1}, 77, 768, false},
                      Ex{GgmlType::Q6_K, 3, {2, 0}, 64, 512, true},
                      // off alignment: rows % 8 != 0 on each kernel, expert counts around the CTA row choice
                      Ex{GgmlType::Q4_K, 10, {9, 0, 3, 7, 1, 2, 8, 5, 4}, 1001, 512, true},
                      Ex{GgmlType::Q4_K, 3, {1}, 9, 256, true}, Ex{GgmlType::Q6_K, 3, {2, 0, 1}, 65, 512, false},
                      Ex{GgmlType::Q8_0, 5, {4, 1, 1}, 9, 224, false}, Ex{GgmlType::IQ4_XS, 2, {1, 0}, 127, 768, true}})
    register_case("gemv", experts_name(e.t, e.pool, e.ids, e.rows, e.cols, e.shared),
                  [e] { gemv_experts_case(e.t, e.pool, e.ids, e.rows, e.cols, e.shared); });
  for (const char* op : {"gemv", "gemv_float", "gemv_experts", "apply_wuv"})
    register_case("gemv", CaseName("gemv_negative_control").p("fault", "gemv_drop_tail").p("op", op).str(),
                  [op = std::string(op)] { drop_tail_control_case(op); });

  for (auto [T, H, dv, v] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{3, 5, 512, 256}, {2, 7, 256, 129}, {1, 17, 512, 9}})
    register_case("gemv", CaseName("apply_wuv").p("type", "Q4_K").p("t", T).p("h", H).p("dv", dv).p("v", v).str(),
                  [T = T, H = H, dv = dv, v = v] { wuv_case(T, H, dv, v); });

  struct Pf {
    GgmlType t;
    Prefill kind;
    int64_t T, rows, cols;
  };
  for (const Pf& p : {Pf{GgmlType::Q4_K, Prefill::F16Weights, 33, 1000, 2048}, Pf{GgmlType::Q5_0, Prefill::F16Weights, 7, 512, 192},
                      Pf{GgmlType::Q4_K, Prefill::X3, 40, 700, 1024}, Pf{GgmlType::Q4_K, Prefill::F32, 40, 700, 1024},
                      Pf{GgmlType::Q4_K, Prefill::F16Weights, 17, 1001, 768}, Pf{GgmlType::Q8_0, Prefill::X3, 9, 65, 224},
                      Pf{GgmlType::Q6_K, Prefill::F32, 1, 129, 256}, Pf{GgmlType::Q8_0, Prefill::F16Weights, 65, 31, 288}})
    register_case("gemm", CaseName("linear_prefill").p("type", type_name(p.t)).p("precision", prefill_name(p.kind)).p("t", p.T)
                              .p("rows", p.rows).p("cols", p.cols).str(),
                  [p] { prefill_case(p.t, p.kind, p.T, p.rows, p.cols); });

  for (auto [T, D, ld] : {std::tuple<int64_t, int64_t, int64_t>{7, 1000, 1000}, {3, 255, 255}, {3, 257, 257}, {2, 127, 127},
                          {2, 129, 129}, {1, 1009, 1009}, {4, 6144, 6144}, {5, 257, 300}, {3, 512, 576},
                          {1, 16384, 16384}, {2, 16388, 16388}, {64, 6144, 6144}})
    register_case("ops", CaseName("norms").p("t", T).p("d", D).p("ld", ld).p("rms_eps", "0.00001").p("ln_eps", "0.000001").str(),
                  [T = T, D = D, ld = ld] { norms_case(T, D, ld); });
  // Norms where eps matters: amplitudes 1e-3, 3e-4, 1e-4 (names: amp_e4 = amplitude in units of 1e-4).
  for (auto [T, D, ld] : {std::tuple<int64_t, int64_t, int64_t>{3, 512, 576}, {2, 6144, 6144}, {5, 128, 128}, {3, 257, 257}})
    for (int amp_e4 : {10, 3, 1})
      for (float eps : {1e-5f, 1e-6f})
        register_case("ops", CaseName("norms_small").p("t", T).p("d", D).p("ld", ld).p("amp_e4", amp_e4)
                                 .p("rms_eps", eps == 1e-5f ? "0.00001" : "0.000001").p("ln_eps", "0.000001").str(),
                      [T = T, D = D, ld = ld, amp_e4, eps] { norms_small_case(T, D, ld, amp_e4 * 1e-4f, eps); });
  for (bool neox : {false, true}) {
    const char* style = neox ? "neox" : "interleaved";
    for (auto [T, nv, stride, col0, dim] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{5, 3, 256, 192, 64},
                                             {3, 7, 70, 3, 66}, {2, 9, 40, 0, 30}, {1, 1, 2, 0, 2}, {7, 5, 131, 1, 130}})
      register_case("ops", CaseName("rope").p("style", style).p("t", T).p("vectors", nv).p("stride", stride).p("col0", col0)
                               .p("dim", dim).p("theta", "1e6").str(),
                    [neox, T = T, nv = nv, stride = stride, col0 = col0, dim = dim] { rope_case(neox, T, nv, stride, col0, dim); });
  }
  // The indexer key's shape (Di 128, RoPE on 64) at 1, 3 and 64 tokens, and off-shape rows (D above the CTA's 128
  // threads and not a multiple of them, RoPE over the whole row).
  for (bool neox : {false, true})
    for (auto [T, D, dim] : {std::tuple<int64_t, int64_t, int64_t>{1, 128, 64}, {3, 128, 64}, {64, 128, 64}, {2, 300, 300}, {5, 66, 2}})
      register_case("ops", CaseName("layernorm_rope").p("style", neox ? "neox" : "interleaved").p("t", T).p("d", D).p("dim", dim).str(),
                    [neox, T = T, D = D, dim = dim] { layernorm_rope_case(neox, T, D, dim); });
  for (auto [T, D] : {std::pair<int64_t, int64_t>{1, 6144}, {3, 6144}, {17, 6144}, {2, 1021}, {5, 576}, {1, 16384}})
    register_case("ops", CaseName("add_rmsnorm").p("t", T).p("d", D).p("eps", "0.00001").str(),
                  [T = T, D = D] { add_rmsnorm_case(T, D); });
  for (auto [T, k, E, pad] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 8, 6144, 0}, {3, 8, 6144, 0}, {17, 2, 1021, 1},
                              {2, 3, 130, 1}, {64, 1, 512, 0}})
    register_case("ops", CaseName("moe_moves").p("t", T).p("k", k).p("e", E).p("pad", pad).str(),
                  [T = T, k = k, E = E, pad = pad] { moe_moves_case(T, k, E, pad); });
  for (int64_t n : {1, 255, 257, 4099})
    register_case("ops", CaseName("silu_gate").p("n", n).str(), [n] { silu_case(n); });
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
