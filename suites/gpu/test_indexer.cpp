// suites/gpu: the lightning indexer scores and the radix-select top-k against the reference's own
// functions (ref::indexer_scores, ref::topk_lower_index), judged by the fixtures judge (op_check.h):
//  - scores: scores class at f32 (fp16 inputs are exact in the reference; the kernels accumulate in fp32);
//  - the selection: exactly ref::topk_lower_index of the kernel's own scores (the rule is exact: ties to
//    the lower index); with the scores within their bound, that is the reference's selection up to
//    near-ties;
//  - the decode selection (indexer_select_f32_rows): exactly indexer_topk_f32_rows's selection on the same
//    inputs (its own scores are work memory, not judged).
// The reference applies the (Hi Di)^-1/2 scale itself; the kernels take w already scaled.
//
// Tiles: the tensor-core scores (Hi 32 or 64, Di 128) take 16 keys per warp, 8 warps per CTA; the SIMT
// scores 64 keys per CTA (4 threads per key); the tiled fp32 scores (Di % 4 == 0, Hi <= 64) 32 keys per
// warp, 4 warps per CTA, heads padded to 8, 16, 32 or 64, dims in chunks of 32; the top-k runs one CTA
// per row, or for L >= 16384 and k <= 3072 CTAs of 8192 scores with up to 16384 candidates per row; the
// decode selection's bounds take 16 keys per warp, its refine step 256 keys per CTA.
// Off-alignment cases run L, T, top_k, heads and dims around those.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/faults.h"
#include "reference/indexer.h"
#include "suites/gpu/gpu_test_util.h"
#include "suites/gpu/host_ref.h"
#include "suites/gpu/op_check.h"

namespace mlaconf::gputest {
namespace {

using test::CaseName;

std::vector<int32_t> ids_of(const ref::MatI& m) { return std::vector<int32_t>(m.data(), m.data() + m.size()); }

// The selection of a [T, L] score matrix (the kernel's, `got`): its top-k `top` is exactly the reference
// rule's on those scores. With the scores within their bound, that makes the selection right up to
// near-ties (where rounding may legitimately decide).
void judge_topk(OpCheck& chk, const std::vector<float>& got, int64_t T, int64_t L, int64_t k, const std::vector<int32_t>& top) {
  ref::Mat<float> own(T, L);
  std::copy(got.begin(), got.end(), own.data());
  chk.exact("topk_of_own_scores", {T, k}, ids_of(ref::topk_lower_index<float>(own, k).idx), top);
}

struct IdxCase {
  int64_t T, Hi, Di, topk, L;
  bool batched = false;  // T sequences, each with its own L keys (indexer_scores_batched) and position
};
std::string idx_name(const IdxCase& c) {
  CaseName n("indexer_topk");
  n.p("t", c.T).p("hi", c.Hi).p("di", c.Di).p("topk", c.topk).p("L", c.L);
  if (c.batched) n.p("keys", "per_sequence");
  return n.p("dtype", "f16");
}

// Scores and top-k of the last T positions of a context of L keys (causal).
void indexer_case(IdxCase c) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(11 + c.L + c.topk);
  std::vector<uint16_t> qb, kb;
  std::vector<float> q, k;
  random_half(rng, c.T * c.Hi * c.Di, 1.0f, &qb, &q);
  const int64_t n_keysets = c.batched ? c.T : 1, k_stride = c.batched ? c.L * c.Di : 0;
  random_half(rng, n_keysets * c.L * c.Di, 1.0f, &kb, &k);
  std::vector<float> w(c.T * c.Hi);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const double wscale = 1.0 / std::sqrt((double)(c.Hi * c.Di));
  for (auto& v : w) v = (float)(u(rng) * wscale);
  std::vector<int32_t> pos(c.T);
  for (int64_t t = 0; t < c.T; ++t) pos[t] = (int32_t)(c.batched ? std::max<int64_t>(0, c.L - 1 - 37 * t) : c.L - c.T + t);
  auto d_q = cuda::to_device(qb), d_k = cuda::to_device(kb), d_w = cuda::to_device(w), d_pos = cuda::to_device(pos);
  cuda::DeviceBuffer d_s(c.T * c.L * 4), d_top(c.T * c.topk * 4);
  auto t0 = std::chrono::steady_clock::now();
  if (c.batched)
    cuda::indexer_scores_batched(d_q.as<uint16_t>(), d_k.as<uint16_t>(), k_stride, d_w.as<float>(), d_pos.as<int32_t>(), c.T,
                                 c.Hi, c.Di, c.L, d_s.as<float>());
  else
    cuda::indexer_scores(d_q.as<uint16_t>(), d_k.as<uint16_t>(), d_w.as<float>(), d_pos.as<int32_t>(), c.T, c.Hi, c.Di, c.L,
                         d_s.as<float>());
  cuda::synchronize();
  auto t1 = std::chrono::steady_clock::now();
  cuda::topk_rows(d_s.as<float>(), c.T, c.L, c.topk, d_top.as<int32_t>());
  cuda::synchronize();
  auto t2 = std::chrono::steady_clock::now();
  const auto scores = cuda::to_host<float>(d_s, c.T * c.L);
  const auto top = cuda::to_host<int32_t>(d_top, c.T * c.topk);

  // Reference scores: the weights unscaled (the reference scales by (Hi Di)^-1/2 itself).
  MatD want(c.T, c.L);
  const double unscale = std::sqrt((double)(c.Hi * c.Di));
  for (int64_t t = 0; t < c.T; ++t) {
    if (!c.batched && t > 0) break;
    const int64_t nq = c.batched ? 1 : c.T;
    MatD wr = mat_of(w, nq, c.Hi, t * c.Hi) * unscale;
    const MatD s = ref::indexer_scores<double>(mat_of_half(qb, nq, c.Hi * c.Di, t * c.Hi * c.Di),
                                               mat_of_half(kb, c.L, c.Di, t * k_stride), wr, c.Hi, pos[t]);
    want.middleRows(t, nq) = s;
  }
  OpCheck chk;
  chk.input("q", [&] { return f16_array({c.T, c.Hi, c.Di}, qb); });
  chk.input("k", [&] { return f16_array({n_keysets, c.L, c.Di}, kb); });
  chk.input("w", [&] { return f32_array({c.T, c.Hi}, w); });
  chk.input("q_pos", [&] { return i32_array({c.T}, pos); });
  chk.tensor("indexer_scores", "f32", {c.T, c.L}, flat(want), as_f64(scores));
  judge_topk(chk, scores, c.T, c.L, c.topk, top);
  std::printf("  scores %.3f ms, top-k %.3f ms\n", std::chrono::duration<double, std::milli>(t1 - t0).count(),
              std::chrono::duration<double, std::milli>(t2 - t1).count());
  expect_pass(chk);
}

// The fp32 indexer (the pipeline's), on fp32 inputs.
void indexer_f32_case(int64_t T, int64_t Hi, int64_t Di, int64_t L) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(12 + L);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> q(T * Hi * Di), k(L * Di), w(T * Hi);
  for (auto& v : q) v = u(rng);
  for (auto& v : k) v = u(rng);
  for (auto& v : w) v = u(rng) / 64;
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = (int32_t)(L - T + t);
  auto d_q = cuda::to_device(q), d_k = cuda::to_device(k), d_w = cuda::to_device(w), d_pos = cuda::to_device(pos);
  cuda::DeviceBuffer d_s(T * L * 4);
  cuda::indexer_scores_f32(d_q.as<float>(), d_k.as<float>(), d_w.as<float>(), d_pos.as<int32_t>(), T, Hi, Di, L, d_s.as<float>());
  cuda::synchronize();
  const MatD want = ref::indexer_scores<double>(mat_of(q, T, Hi * Di), mat_of(k, L, Di), mat_of(w, T, Hi) * std::sqrt((double)(Hi * Di)),
                                                Hi, L - T);
  OpCheck chk;
  chk.input("q", [&] { return f32_array({T, Hi, Di}, q); });
  chk.input("k", [&] { return f32_array({L, Di}, k); });
  chk.input("w", [&] { return f32_array({T, Hi}, w); });
  chk.input("q_pos", [&] { return i32_array({T}, pos); });
  chk.tensor("indexer_scores", "f32", {T, L}, flat(want), as_f64(cuda::to_host<float>(d_s, T * L)));
  expect_pass(chk);
}

// The reference's fp32-keys scores [T, L]: query row t over the L keys (Di each) at keys[off[t] ..], the
// weights w as the kernels take them (scaled by (Hi Di)^-1/2; the reference applies that itself).
MatD ref_scores_rows(const std::vector<float>& q, const std::vector<float>& keys, const std::vector<int64_t>& off,
                     const std::vector<float>& w, const std::vector<int32_t>& pos, int64_t T, int64_t Hi, int64_t Di, int64_t L) {
  MatD want(T, L);
  for (int64_t t = 0; t < T; ++t)
    want.row(t) = ref::indexer_scores<double>(mat_of(q, 1, Hi * Di, t * Hi * Di), mat_of(keys, L, Di, off[t]),
                                              mat_of(w, 1, Hi, t * Hi) * std::sqrt((double)(Hi * Di)), Hi, pos[t]);
  return want;
}

// The fp32 entry points (the pipeline's indexer) on T sequences with their own keys at k_off[t] =
// t * (L * Di + skew) (skew 1: key regions off 16 bytes, the tiled kernel's 4-byte copy path), positions
// L - 1 - 37 t (partial and wholly future tiles). Judged: (1) against the reference (scores class, f32);
// (2) bit for bit against the SIMT kernel (indexer_scores_f32_simt: one arithmetic for every shape);
// (3) batch invariance: each row bit for bit equal to the same row scored alone (T = 1), with the shared-
// key entry point (indexer_scores_f32).
void indexer_f32_rows_case(int64_t T, int64_t Hi, int64_t Di, int64_t L, int64_t skew) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(13 + L + Hi * 7 + Di);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t region = L * Di + skew;
  std::vector<float> q(T * Hi * Di), k(T * region), w(T * Hi);
  for (auto& v : q) v = u(rng);
  for (auto& v : k) v = u(rng);
  for (auto& v : w) v = u(rng) / std::sqrt((float)(Hi * Di));
  std::vector<int32_t> pos(T);
  std::vector<int64_t> off(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = (int32_t)std::max<int64_t>(0, L - 1 - 37 * t), off[t] = t * region + skew;
  auto d_q = cuda::to_device(q), d_k = cuda::to_device(k), d_w = cuda::to_device(w), d_pos = cuda::to_device(pos),
       d_off = cuda::to_device(off);
  cuda::DeviceBuffer d_s(T * L * 4), d_simt(T * L * 4), d_one(L * 4);
  cuda::indexer_scores_f32_rows(d_q.as<float>(), d_k.as<float>(), d_off.as<int64_t>(), d_w.as<float>(), d_pos.as<int32_t>(), T, Hi,
                                Di, L, d_s.as<float>());
  cuda::indexer_scores_f32_simt(d_q.as<float>(), d_k.as<float>(), d_off.as<int64_t>(), d_w.as<float>(), d_pos.as<int32_t>(), T, Hi,
                                Di, L, d_simt.as<float>());
  std::vector<float> alone(T * L);
  for (int64_t t = 0; t < T; ++t) {
    cuda::indexer_scores_f32(d_q.as<float>() + t * Hi * Di, d_k.as<float>() + off[t], d_w.as<float>() + t * Hi,
                             d_pos.as<int32_t>() + t, 1, Hi, Di, L, d_one.as<float>());
    const std::vector<float> r = cuda::to_host<float>(d_one, L);
    std::copy(r.begin(), r.end(), alone.begin() + t * L);
  }
  const std::vector<float> got = cuda::to_host<float>(d_s, T * L), simt = cuda::to_host<float>(d_simt, T * L);
  const MatD want = ref_scores_rows(q, k, off, w, pos, T, Hi, Di, L);
  OpCheck chk;
  chk.input("q", [&] { return f32_array({T, Hi, Di}, q); });
  chk.input("k", [&] { return f32_array({T * region}, k); });
  chk.input("w", [&] { return f32_array({T, Hi}, w); });
  chk.input("q_pos", [&] { return i32_array({T}, pos); });
  chk.tensor("indexer_scores", "f32", {T, L}, flat(want), as_f64(got));
  chk.bits("scores_vs_simt_kernel", {T, L}, simt, got);
  chk.bits("scores_vs_each_row_alone", {T, L}, alone, got);
  expect_pass(chk);
}

// indexer_topk_f32_rows (the pipeline's decode call: scores + top-k, the top-k's first pass fused into
// the scores kernel where the multi-CTA top-k runs) against the two separate calls on the same inputs:
// scores bit for bit, selections equal, and the selection exactly the reference rule's on the kernel's
// own scores; the scores against the reference. Run twice (the fused pass's work memory must be left
// zero). Row 2's position is 100: fewer finite scores than k (-1 padding). shared: keys shared by all rows.
void indexer_topk_f32_case(int64_t T, int64_t Hi, int64_t Di, int64_t L, int64_t k, bool shared) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(41 + L + k);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t n_sets = shared ? 1 : T;
  std::vector<float> q(T * Hi * Di), kk(n_sets * L * Di), w(T * Hi);
  for (auto& v : q) v = u(rng);
  for (auto& v : kk) v = u(rng);
  for (auto& v : w) v = u(rng) / std::sqrt((float)(Hi * Di));
  std::vector<int32_t> pos(T);
  std::vector<int64_t> off(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = (int32_t)(t == 2 ? 100 : L - 1 - 37 * t), off[t] = shared ? 0 : t * L * Di;
  auto d_q = cuda::to_device(q), d_k = cuda::to_device(kk), d_w = cuda::to_device(w), d_pos = cuda::to_device(pos),
       d_off = cuda::to_device(off);
  cuda::DeviceBuffer d_s(T * L * 4), d_s2(T * L * 4), d_top(T * k * 4), d_top2(T * k * 4);
  const int64_t* ko = shared ? nullptr : d_off.as<int64_t>();
  std::vector<float> first;
  std::vector<int32_t> first_top;
  for (int rep = 0; rep < 2; ++rep) {
    cuda::indexer_topk_f32_rows(d_q.as<float>(), d_k.as<float>(), ko, d_w.as<float>(), d_pos.as<int32_t>(), T, Hi, Di, L, k,
                                d_s.as<float>(), d_top.as<int32_t>());
    if (rep == 0) first = cuda::to_host<float>(d_s, T * L), first_top = cuda::to_host<int32_t>(d_top, T * k);
  }
  if (shared) cuda::indexer_scores_f32(d_q.as<float>(), d_k.as<float>(), d_w.as<float>(), d_pos.as<int32_t>(), T, Hi, Di, L, d_s2.as<float>());
  else cuda::indexer_scores_f32_rows(d_q.as<float>(), d_k.as<float>(), ko, d_w.as<float>(), d_pos.as<int32_t>(), T, Hi, Di, L, d_s2.as<float>());
  cuda::topk_rows(d_s2.as<float>(), T, L, k, d_top2.as<int32_t>());
  const std::vector<float> got = cuda::to_host<float>(d_s, T * L), sep = cuda::to_host<float>(d_s2, T * L);
  const std::vector<int32_t> top = cuda::to_host<int32_t>(d_top, T * k), top2 = cuda::to_host<int32_t>(d_top2, T * k);
  const MatD want = ref_scores_rows(q, kk, off, w, pos, T, Hi, Di, L);
  OpCheck chk;
  chk.input("q", [&] { return f32_array({T, Hi, Di}, q); });
  chk.input("k", [&] { return f32_array({n_sets, L, Di}, kk); });
  chk.input("w", [&] { return f32_array({T, Hi}, w); });
  chk.input("q_pos", [&] { return i32_array({T}, pos); });
  chk.tensor("indexer_scores", "f32", {T, L}, flat(want), as_f64(got));
  chk.bits("scores_vs_separate_calls", {T, L}, sep, got);
  chk.bits("scores_second_call", {T, L}, first, got);
  judge_topk(chk, got, T, L, k, top);
  chk.exact("topk_vs_separate_calls", {T, k}, top2, top);
  chk.exact("topk_second_call", {T, k}, first_top, top);
  expect_pass(chk);
}

// More than 65535 query rows (the launch's grid.y limit): the tiled kernel launches the rows in
// pieces. Shared keys; rows 0..65534 bit for bit against the SIMT kernel, and the rows around the piece
// boundary (65534..T-1) against each scored alone.
void indexer_f32_many_rows_case() {
  MLACONF_REQUIRE_CUDA();
  const int64_t T = 65537, Hi = 8, Di = 32, L = 33;
  std::mt19937_64 rng(31);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> q(T * Hi * Di), k(L * Di), w(T * Hi);
  for (auto& v : q) v = u(rng);
  for (auto& v : k) v = u(rng);
  for (auto& v : w) v = u(rng) / 16;
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = (int32_t)(t % L);
  auto d_q = cuda::to_device(q), d_k = cuda::to_device(k), d_w = cuda::to_device(w), d_pos = cuda::to_device(pos);
  cuda::DeviceBuffer d_s(T * L * 4), d_simt(65535 * L * 4), d_one(L * 4);
  cuda::indexer_scores_f32(d_q.as<float>(), d_k.as<float>(), d_w.as<float>(), d_pos.as<int32_t>(), T, Hi, Di, L, d_s.as<float>());
  cuda::indexer_scores_f32_simt(d_q.as<float>(), d_k.as<float>(), nullptr, d_w.as<float>(), d_pos.as<int32_t>(), 65535, Hi, Di, L,
                                d_simt.as<float>());
  const std::vector<float> got = cuda::to_host<float>(d_s, T * L), simt = cuda::to_host<float>(d_simt, 65535 * L);
  std::vector<float> tail_alone, tail_got;
  for (int64_t t = 65534; t < T; ++t) {
    cuda::indexer_scores_f32(d_q.as<float>() + t * Hi * Di, d_k.as<float>(), d_w.as<float>() + t * Hi, d_pos.as<int32_t>() + t, 1,
                             Hi, Di, L, d_one.as<float>());
    const std::vector<float> r = cuda::to_host<float>(d_one, L);
    tail_alone.insert(tail_alone.end(), r.begin(), r.end());
    tail_got.insert(tail_got.end(), got.begin() + t * L, got.begin() + (t + 1) * L);
  }
  OpCheck chk;
  chk.bits("scores_vs_simt_kernel_rows_0_to_65534", {65535, L}, simt, std::vector<float>(got.begin(), got.begin() + 65535 * L));
  chk.bits("scores_vs_each_row_alone_rows_65534_up", {T - 65534, L}, tail_alone, tail_got);
  expect_pass(chk);
}

// fp32 keys over 2^31 elements (16.8M keys x 128 f32 = 8.6 GB, filled on the device): the tiled kernel's
// key offsets in 64 bits, by both fp32 entry points. Two queries over all keys (shared keys; scores of 4096
// keys around the 2^31-element mark, the last ones and a random spread judged against the reference), and
// one query over the last 40000 keys through k_off (an offset past 2^31 elements): bit for bit the same
// scores as the first query's over those keys (same q, w; every key causal).
// The judged keys of a case over more than 2^31 key elements (all <= L - 2, so causal for both queries): the
// 1024 below the last, the 1024 around the first key at or past element 2^31, then random keys up to 4096.
std::vector<int64_t> huge_judged_keys(int64_t L, int64_t Di, std::mt19937_64& rng) {
  const int64_t first_high = ((int64_t)1 << 31) / Di;
  std::vector<int64_t> keys;
  for (int64_t r = L - 1025; r <= L - 2; ++r) keys.push_back(r);
  for (int64_t r = first_high - 512; r < first_high + 512; ++r) keys.push_back(r);
  while ((int64_t)keys.size() < 4096) keys.push_back((int64_t)(rng() % (L - 1)));
  return keys;
}

// Those keys' rows of the pattern fill_pattern_f16 / fill_pattern_f32 wrote with `seed`, [keys, Di].
MatD pattern_key_rows(const std::vector<int64_t>& keys, int64_t Di, uint64_t seed) {
  MatD K(keys.size(), Di);
  for (size_t j = 0; j < keys.size(); ++j)
    for (int64_t x = 0; x < Di; ++x) K(j, x) = cuda::half_bits_to_float_host(cuda::pattern_half_bits(seed, keys[j], x));
  return K;
}

void huge_keys_f32_case() {
  MLACONF_REQUIRE_CUDA();
  const int64_t T = 2, Hi = 32, Di = 128, L = ((int64_t)1 << 31) / Di + 50'000, L2 = 40'000;
  ASSERT_GT((L - L2) * Di, (int64_t)1 << 31);
  cuda::DeviceBuffer d_k((size_t)(L * Di) * 4);
  const uint64_t seed = 19;
  cuda::fill_pattern_f32(d_k.as<float>(), L, Di, seed);
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> q(T * Hi * Di), w(T * Hi);
  for (auto& v : q) v = u(rng);
  for (auto& v : w) v = (float)(u(rng) / std::sqrt((double)(Hi * Di)));
  const std::vector<int32_t> pos = {(int32_t)(L - 1), (int32_t)(L - 2)}, pos2 = {(int32_t)(L2 - 1)};
  const std::vector<int64_t> off2 = {(L - L2) * Di};
  auto d_q = cuda::to_device(q), d_w = cuda::to_device(w), d_pos = cuda::to_device(pos), d_pos2 = cuda::to_device(pos2),
       d_off2 = cuda::to_device(off2);
  cuda::DeviceBuffer d_s((size_t)(T * L) * 4), d_s2((size_t)L2 * 4);
  cuda::indexer_scores_f32(d_q.as<float>(), d_k.as<float>(), d_w.as<float>(), d_pos.as<int32_t>(), T, Hi, Di, L, d_s.as<float>());
  cuda::indexer_scores_f32_rows(d_q.as<float>(), d_k.as<float>(), d_off2.as<int64_t>(), d_w.as<float>(), d_pos2.as<int32_t>(), 1, Hi,
                                Di, L2, d_s2.as<float>());
  const std::vector<int64_t> keys = huge_judged_keys(L, Di, rng);
  const MatD K = pattern_key_rows(keys, Di, seed);
  const std::vector<float> all = cuda::to_host<float>(d_s, T * L), tail = cuda::to_host<float>(d_s2, L2);
  std::vector<double> got, want;
  for (int64_t t = 0; t < T; ++t) {
    const MatD s = ref::indexer_scores<double>(mat_of(q, 1, Hi * Di, t * Hi * Di), K, mat_of(w, 1, Hi, t * Hi) * std::sqrt((double)(Hi * Di)),
                                               Hi, (int64_t)keys.size());
    for (size_t j = 0; j < keys.size(); ++j) want.push_back(s(0, j)), got.push_back(all[t * L + keys[j]]);
  }
  OpCheck chk;
  chk.input("q", [&] { return f32_array({T, Hi, Di}, q); });
  chk.input("w", [&] { return f32_array({T, Hi}, w); });
  chk.input("judged_keys", [&] { return f64_array({(int64_t)keys.size()}, std::vector<double>(keys.begin(), keys.end())); });
  chk.input("key_pattern_seed", [&] { return i32_array({1}, {(int32_t)seed}); });
  chk.tensor("indexer_scores", "f32", {T, (int64_t)keys.size()}, want, as_f64(got));
  chk.bits("scores_by_k_off_past_2p31", {L2}, std::vector<float>(all.begin() + (L - L2), all.begin() + L), tail);
  expect_pass(chk);
}

// indexer_select_f32_rows (the decode step's call: fp16 tensor-core scores with an error bound choose the
// keys that get exact scores) against indexer_topk_f32_rows on the same inputs: the same selection, index
// for index. Its scores are not judged (they are work memory). Data:
//  - "uniform": q, keys and w uniform (as indexer_topk_f32_case);
//  - "edge": 5000 keys whose exact scores lie in [8, 8.0005], on a bin edge of the top-k's first histogram,
//    with fp16 rounding moving them by ~0.003 (only head 0 weighs: w = (1, 0, ...), q_0 = 1 on dims 0..7,
//    key dims 0..7 summing to 8 + delta); the other keys score under 8 (dims 0..7 in [-1, 1]). Which of the
//    5000 are selected depends on their exact scores only, and the filter must refine them all (without
//    the bound, about 350 of the right keys fall under 8 and are left out: a numpy model of the data);
//  - "special": uniform, plus keys with an element past fp16's range (a large exact score), a NaN and an
//    infinite element, and runs of exact duplicates;
//  - "big_q": uniform, with an element of q past fp16's range in every row: every key is refined, more
//    than the refine step's list holds, so topk_collect selects (its fallback).
// Row 2 (T > 2) at position 100: fewer finite scores than k. skew: per-sequence key regions 1 element off
// 16 bytes. Run twice (the work memory must be left zero). fault: under indexer-no-bound (the bound taken
// as 0) the edge data must be caught.
void indexer_select_case(int64_t T, int64_t Hi, int64_t L, int64_t k, bool shared, const std::string& data, int64_t skew,
                         bool fault = false) {
  MLACONF_REQUIRE_CUDA();
  const int64_t Di = 128;
  std::mt19937_64 rng(77 + L + k + Hi);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t n_sets = shared ? 1 : T;
  std::vector<float> q(T * Hi * Di), kk(n_sets * L * Di + skew), w(T * Hi);
  for (auto& v : q) v = u(rng);
  for (auto& v : kk) v = u(rng);
  for (auto& v : w) v = u(rng) / std::sqrt((float)(Hi * Di));
  for (int64_t set = 0; set < n_sets; ++set) {
    float* K = kk.data() + skew + set * L * Di;
    if (data == "edge") {
      std::uniform_real_distribution<float> part(0.5f, 1.5f), delta(0.f, 0.0005f);
      for (int64_t i = 0; i < 5000; ++i) {
        float* key = K + (7 + 3 * i) * Di;
        float sum = 0.f;
        for (int j = 0; j < 7; ++j) sum += key[j] = part(rng);
        key[7] = 8.f + delta(rng) - sum;
      }
    } else if (data == "special") {
      K[5 * Di + 3] = 70000.f;
      K[6 * Di + 4] = NAN;
      K[8 * Di + 5] = INFINITY;
      K[9 * Di + 6] = -INFINITY;
      for (int64_t r = 0; r < 50; ++r)
        for (int64_t c = 1; c <= 40; ++c) std::copy(K + (1000 + 97 * r) * Di, K + (1001 + 97 * r) * Di, K + (1000 + 97 * r + c) * Di);
    }
  }
  if (data == "big_q")  // past fp16's range in every row: no bound, every key refined (more than the list holds)
    for (int64_t t = 0; t < T; ++t) q[t * Hi * Di + 5] = 70000.f;
  if (data == "edge") {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < Hi; ++h) w[t * Hi + h] = h == 0 ? 1.f : 0.f;
      std::fill(q.begin() + t * Hi * Di, q.begin() + t * Hi * Di + Di, 0.f);
      std::fill(q.begin() + t * Hi * Di, q.begin() + t * Hi * Di + 8, 1.f);
    }
  }
  std::vector<int32_t> pos(T);
  std::vector<int64_t> off(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = (int32_t)(t == 2 ? 100 : L - 1 - 37 * t), off[t] = skew + (shared ? 0 : t * L * Di);
  auto d_q = cuda::to_device(q), d_k = cuda::to_device(kk), d_w = cuda::to_device(w), d_pos = cuda::to_device(pos),
       d_off = cuda::to_device(off);
  cuda::DeviceBuffer d_s(T * L * 4), d_s2(T * L * 4), d_top(T * k * 4), d_top2(T * k * 4);
  const int64_t* ko = shared && !skew ? nullptr : d_off.as<int64_t>();
  std::vector<int32_t> first_top;
  for (int rep = 0; rep < 2; ++rep) {
    cuda::ScopedFault f(fault ? cuda::Fault::IndexerNoBound : cuda::Fault::None);
    cuda::indexer_select_f32_rows(d_q.as<float>(), d_k.as<float>(), ko, d_w.as<float>(), d_pos.as<int32_t>(), T, Hi, Di, L, k,
                                  d_s.as<float>(), d_top.as<int32_t>());
    if (rep == 0) first_top = cuda::to_host<int32_t>(d_top, T * k);
  }
  cuda::indexer_topk_f32_rows(d_q.as<float>(), d_k.as<float>(), ko, d_w.as<float>(), d_pos.as<int32_t>(), T, Hi, Di, L, k,
                              d_s2.as<float>(), d_top2.as<int32_t>());
  const std::vector<int32_t> top = cuda::to_host<int32_t>(d_top, T * k), top2 = cuda::to_host<int32_t>(d_top2, T * k);
  OpCheck chk(fault ? testing::TempDir() + "/mlaconf_repro_indexer_no_bound" : "");
  chk.input("q", [&] { return f32_array({T, Hi, Di}, q); });
  chk.input("k", [&] { return f32_array({(int64_t)kk.size()}, kk); });
  chk.input("k_off", [&] { return f64_array({T}, std::vector<double>(off.begin(), off.end())); });
  chk.input("w", [&] { return f32_array({T, Hi}, w); });
  chk.input("q_pos", [&] { return i32_array({T}, pos); });
  chk.exact("topk_vs_indexer_topk_f32_rows", {T, k}, top2, top);
  chk.exact("topk_second_call", {T, k}, first_top, top);
  if (fault) {
    std::printf("%s", chk.summary().c_str());
    EXPECT_FALSE(chk.pass()) << "a filter without its error bound must be caught";
  } else {
    expect_pass(chk);
  }
}

// topk_rows over host scores s [T, L] (under `fault`), judged exactly against topk_lower_index of the same
// scores (the reference's rule: largest first, ties to the lower index). The check's "scores" input reads
// s when a reproducer is written: s must outlive the returned check.
OpCheck topk_rows_check(const std::vector<float>& s, int64_t T, int64_t L, int64_t k, cuda::Fault fault = cuda::Fault::None,
                        std::string repro_dir = "") {
  auto d_s = cuda::to_device(s);
  cuda::DeviceBuffer d_top(T * k * 4);
  {
    cuda::ScopedFault f(fault);
    cuda::topk_rows(d_s.as<float>(), T, L, k, d_top.as<int32_t>());
    cuda::synchronize();
  }
  ref::Mat<float> sm(T, L);
  std::copy(s.begin(), s.end(), sm.data());
  OpCheck chk(std::move(repro_dir));
  chk.input("scores", [&s, T, L] { return f32_array({T, L}, s); });
  chk.exact("topk", {T, k}, ids_of(ref::topk_lower_index<float>(sm, k).idx), cuda::to_host<int32_t>(d_top, T * k));
  return chk;
}

// More rows than the multi-CTA top-k takes per pass (512): rows 512 and 513 run in a second pass over
// the same work memory. Random scores with a few ties and -inf holes.
void topk_many_rows_case() {
  MLACONF_REQUIRE_CUDA();
  const int64_t T = 514, L = 16385, k = 2048;
  std::mt19937_64 rng(51);
  std::vector<float> s(T * L);
  for (int64_t i = 0; i < T * L; ++i) s[i] = i % 7 == 0 ? -INFINITY : (float)(int64_t)(rng() % 50000) / 64.0f - 300.0f;
  OpCheck chk = topk_rows_check(s, T, L, k);
  expect_pass(chk);
}

// The multi-CTA top-k's candidate list (the k-th largest key's 11-bit bin, up to 16384 per row): every
// finite score in [1, 1.25), one bin, so the list holds all L of them: L = 16384 fills it exactly, 16385
// overflows it (the one-CTA fallback). Row 0: 4096 levels (about 4 copies of each: ties by index); row 1:
// 2^21 levels (nearly distinct: the key-bit passes decide).
void topk_one_bin_case(int64_t L, int64_t k) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(L * 3 + k);
  const int64_t T = 2;
  std::vector<float> s(T * L);
  for (int64_t i = 0; i < L; ++i) {
    s[i] = 1.0f + (float)(rng() % 4096) / 16384.0f;
    s[L + i] = 1.0f + (float)(rng() % (1u << 21)) / (float)(1u << 23);
  }
  OpCheck chk = topk_rows_check(s, T, L, k);
  expect_pass(chk);
}

// Keys over 2^31 elements (L x 128 f16, filled on the device): scores read past the 2^31-element mark
// with 64-bit offsets. Two queries at the last positions; the scores of 4096 keys (the last ones, those
// around the mark, a random spread) are judged against the reference on those keys. (The top-k of such a
// row is not judged here: its 16.8M scores stay far below 2^31, and the host sort alone takes seconds.)
void huge_keys_case() {
  MLACONF_REQUIRE_CUDA();
  const int64_t T = 2, Hi = 32, Di = 128, L = ((int64_t)1 << 31) / Di + 50'000;
  ASSERT_GT(L * Di, (int64_t)1 << 31);
  cuda::DeviceBuffer d_k((size_t)(L * Di) * 2);
  const uint64_t seed = 17;
  cuda::fill_pattern_f16(d_k.as<uint16_t>(), L, Di, seed);
  std::mt19937_64 rng(21);
  std::vector<uint16_t> qb;
  std::vector<float> q;
  random_half(rng, T * Hi * Di, 1.0f, &qb, &q);
  std::vector<float> w(T * Hi);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& v : w) v = (float)(u(rng) / std::sqrt((double)(Hi * Di)));
  const std::vector<int32_t> pos = {(int32_t)(L - 1), (int32_t)(L - 2)};
  auto d_q = cuda::to_device(qb), d_w = cuda::to_device(w), d_pos = cuda::to_device(pos);
  cuda::DeviceBuffer d_s((size_t)(T * L) * 4);
  cuda::indexer_scores(d_q.as<uint16_t>(), d_k.as<uint16_t>(), d_w.as<float>(), d_pos.as<int32_t>(), T, Hi, Di, L, d_s.as<float>());
  cuda::synchronize();
  const std::vector<int64_t> keys = huge_judged_keys(L, Di, rng);
  const MatD K = pattern_key_rows(keys, Di, seed);
  std::vector<float> all = cuda::to_host<float>(d_s, T * L);
  std::vector<double> got, want;
  for (int64_t t = 0; t < T; ++t) {
    const MatD s = ref::indexer_scores<double>(mat_of_half(qb, 1, Hi * Di, t * Hi * Di), K,
                                               mat_of(w, 1, Hi, t * Hi) * std::sqrt((double)(Hi * Di)), Hi, (int64_t)keys.size());
    for (size_t j = 0; j < keys.size(); ++j) want.push_back(s(0, j)), got.push_back(all[t * L + keys[j]]);
  }
  OpCheck chk;
  chk.input("q", [&] { return f16_array({T, Hi, Di}, qb); });
  chk.input("w", [&] { return f32_array({T, Hi}, w); });
  chk.input("q_pos", [&] { return i32_array({T}, pos); });
  chk.input("judged_keys", [&] { return f64_array({(int64_t)keys.size()}, std::vector<double>(keys.begin(), keys.end())); });
  chk.input("key_pattern_seed", [&] { return i32_array({1}, {(int32_t)seed}); });
  chk.tensor("indexer_scores", "f32", {T, (int64_t)keys.size()}, want, as_f64(got));
  expect_pass(chk);
}

// Exact selection on tie-heavy rows (integer scores, -inf holes, short rows): equal to the reference rule.
// levels = 7: many exact ties (the multi-CTA top-k falls back to one CTA); 20000: a few copies of each
// value (its tie resolution by index runs on a handful of candidates). With the fault topk-upper-tie
// (ties to the higher index) the check must fail.
void topk_exact_case(int64_t L, int64_t k, bool fault, int levels = 7) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(L * 7 + k);
  const int64_t T = 6;
  std::vector<float> s(T * L);
  for (auto& v : s) v = (float)(int64_t)(rng() % levels) - (float)(levels / 3);  // exact ties, negatives too
  for (int64_t i = 0; i < L; i += 5) s[i] = -INFINITY;
  for (int64_t i = 0; i < L; ++i) s[5 * L + i] = i < 3 ? 1.0f : -INFINITY;  // row 5: fewer finite than k
  OpCheck chk = topk_rows_check(s, T, L, k, fault ? cuda::Fault::TopkUpperTie : cuda::Fault::None,
                                fault ? testing::TempDir() + "/mlaconf_repro_topk_tie" : "");
  if (fault) {
    std::printf("%s", chk.summary().c_str());
    EXPECT_FALSE(chk.pass()) << "the higher-index tie rule must be caught";
  } else {
    expect_pass(chk);
  }
}

const bool registered = [] {
  for (IdxCase c : {IdxCase{4, 32, 128, 2048, 4096}, IdxCase{4, 32, 128, 2048, 32768}, IdxCase{1, 32, 128, 2048, 200000},
                    IdxCase{3, 7, 66, 37, 1001},
                    // the tensor-core path's other head count, a partial last tile, a context under one tile
                    IdxCase{5, 64, 128, 2048, 4099}, IdxCase{2, 32, 128, 8, 13},
                    // batched decode: keys per sequence (tensor-core path and SIMT path)
                    IdxCase{4, 32, 128, 2048, 9000, true}, IdxCase{3, 7, 66, 37, 1001, true},
                    // off alignment, tensor-core scores: L around 16-key tiles and 128-key CTAs, T odd
                    IdxCase{1, 32, 128, 1, 1}, IdxCase{3, 32, 128, 8, 15}, IdxCase{3, 32, 128, 8, 17},
                    IdxCase{5, 32, 128, 64, 127}, IdxCase{5, 64, 128, 64, 129}, IdxCase{7, 32, 128, 2048, 4095},
                    IdxCase{9, 64, 128, 2048, 4097},
                    // off alignment, top-k: k around warps and powers of two, a prime; one-CTA rows
                    IdxCase{2, 32, 128, 7, 4099}, IdxCase{2, 32, 128, 9, 4099}, IdxCase{2, 32, 128, 255, 4099},
                    IdxCase{2, 32, 128, 257, 4099}, IdxCase{2, 32, 128, 2047, 4099}, IdxCase{2, 32, 128, 2049, 4099},
                    IdxCase{2, 32, 128, 2039, 4099},
                    // multi-CTA top-k: L around its 16384 threshold and 8192-score chunks, k around its 3072 cap
                    IdxCase{2, 32, 128, 2048, 16383}, IdxCase{2, 32, 128, 2048, 16385}, IdxCase{2, 32, 128, 3071, 24577},
                    IdxCase{2, 32, 128, 3072, 24575}, IdxCase{2, 32, 128, 3073, 24577},
                    // off alignment, SIMT scores: heads, dims (even) and L around its 64-key CTAs
                    IdxCase{3, 31, 126, 33, 63}, IdxCase{3, 33, 130, 33, 65}, IdxCase{1, 1, 2, 1, 1},
                    IdxCase{3, 33, 130, 65, 1009, true}})
    register_case("indexer", idx_name(c), [c] { indexer_case(c); });
  for (auto [L, k] : {std::pair<int64_t, int64_t>{4096, 2048}, {200000, 2048}, {1001, 37}, {50, 64}, {16385, 3072}, {24577, 1}})
    register_case("indexer", CaseName("topk_exact").p("L", L).p("k", k).p("ties", "many").str(),
                  [L = L, k = k] { topk_exact_case(L, k, false); });
  register_case("indexer", "topk_exact(L=100000,k=2048,ties=few)", [] { topk_exact_case(100000, 2048, false, 20000); });
  register_case("indexer", "topk_exact(L=40000,k=3000,ties=few)", [] { topk_exact_case(40000, 3000, false, 20000); });
  register_case("indexer", "topk_exact(L=24577,k=3071,ties=few)", [] { topk_exact_case(24577, 3071, false, 20000); });
  for (auto [T, Hi, Di, L] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{3, 32, 128, 5000}, {2, 7, 66, 63}, {3, 33, 130, 1009}})
    register_case("indexer", CaseName("indexer_scores").p("t", T).p("hi", Hi).p("di", Di).p("L", L).p("dtype", "f32").str(),
                  [T = T, Hi = Hi, Di = Di, L = L] { indexer_f32_case(T, Hi, Di, L); });
  register_case("indexer", "indexer_scores(t=2,hi=32,di=128,L=16827216,keys=gt2^31elems,dtype=f16)", huge_keys_case);
  // The tiled fp32 scores (32-key warp tiles, 4 warps per CTA, heads padded to 8 / 16 / 32 / 64, dims in
  // chunks of 32): L around 32 and 128, heads around each padding, dims around the chunk and off 16 bytes
  // (Di % 4 != 0 and Hi > 64: the SIMT kernel), key regions off 16 bytes, the GLM-5 shape.
  for (auto [T, Hi, Di, L, skew] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>>{
           {3, 32, 128, 31, 0}, {3, 32, 128, 33, 0}, {3, 32, 128, 127, 0}, {5, 32, 128, 129, 0}, {4, 32, 128, 4097, 0},
           {3, 7, 32, 65, 0}, {3, 9, 36, 65, 0}, {3, 31, 28, 129, 0}, {3, 33, 124, 129, 0}, {2, 63, 132, 97, 0},
           {2, 64, 128, 1001, 0}, {2, 65, 128, 129, 0}, {3, 7, 66, 63, 0}, {3, 32, 128, 1001, 1}, {1, 1, 4, 1, 0}})
    register_case("indexer",
                  CaseName("indexer_scores").p("t", T).p("hi", Hi).p("di", Di).p("L", L).p("keys", skew ? "per_sequence_unaligned" : "per_sequence")
                      .p("dtype", "f32").str(),
                  [T = T, Hi = Hi, Di = Di, L = L, skew = skew] { indexer_f32_rows_case(T, Hi, Di, L, skew); });
  register_case("indexer", "indexer_scores(t=65537,hi=8,di=32,L=33,dtype=f32)", indexer_f32_many_rows_case);
  // Scores + top-k in one call: fused (L >= 16384, k <= 3072) and not (L 16383, k 3073), per-sequence and
  // shared keys, the GLM-5 shape at 128K, a padded head tile.
  for (auto [T, Hi, Di, L, k, shared] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool>>{
           {3, 32, 128, 16384, 2048, false}, {3, 32, 128, 16383, 2048, false}, {4, 32, 128, 40001, 3072, false},
           {3, 32, 128, 40001, 3073, false}, {3, 32, 128, 24577, 2048, true}, {1, 32, 128, 131072, 2048, false},
           {3, 7, 32, 20000, 37, false}})
    register_case("indexer",
                  CaseName("indexer_topk").p("t", T).p("hi", Hi).p("di", Di).p("topk", k).p("L", L).p("keys", shared ? "shared" : "per_sequence")
                      .p("entry", "indexer_topk_f32_rows").p("dtype", "f32").str(),
                  [T = T, Hi = Hi, Di = Di, L = L, k = k, shared = shared] { indexer_topk_f32_case(T, Hi, Di, L, k, shared); });
  register_case("indexer", "indexer_scores(t=2,hi=32,di=128,L=16827216,keys=gt2^31elems,dtype=f32)", huge_keys_f32_case);
  register_case("indexer", "topk_exact(t=514,L=16385,k=2048,ties=few)", topk_many_rows_case);
  for (int64_t L : {16384, 16385}) register_case("indexer", CaseName("topk_exact").p("L", L).p("k", 2048).p("ties", "one_bin").str(), [L] { topk_one_bin_case(L, 2048); });
  register_case("indexer", "topk_negative_control(fault=topk_upper_tie,L=4096,k=2048)", [] { topk_exact_case(4096, 2048, true); });
  // The decode selection (indexer_select_f32_rows) against indexer_topk_f32_rows: its two head counts, L
  // around the 16384 threshold (16383: the fallback), both refine CTA sizes (1024 keys where T x L / 1024 reaches two
  // CTAs per SM of the device: the t = 16 and t = 8 cases on up to 256 SMs), k at its 3072 cap and
  // past it (the fallback), shared and per-sequence keys, a region off 16 bytes, the GLM-5 shape at 128K;
  // keys on a bin edge, keys past fp16's range and duplicates; the fault that drops the bound.
  for (auto [T, Hi, L, k, shared, data, skew] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, std::string, int64_t>>{
           {3, 32, 16384, 2048, false, "uniform", 0}, {2, 32, 16383, 2048, false, "uniform", 0}, {4, 64, 40001, 3072, false, "uniform", 0},
           {3, 32, 40001, 3073, false, "uniform", 0}, {3, 32, 24577, 2048, true, "uniform", 0}, {3, 32, 17409, 2048, false, "uniform", 1},
           {1, 32, 131072, 2048, false, "uniform", 0}, {3, 32, 20000, 2048, false, "edge", 0}, {2, 64, 20000, 2048, true, "edge", 0},
           {3, 32, 20000, 2048, false, "special", 0}, {2, 64, 16385, 1, false, "special", 0}, {2, 32, 20000, 2048, false, "big_q", 0},
           {16, 32, 32768, 2048, false, "uniform", 0}, {8, 64, 65537, 2048, true, "edge", 0}})
    register_case("indexer",
                  CaseName("indexer_select").p("t", T).p("hi", Hi).p("di", 128).p("topk", k).p("L", L)
                      .p("keys", shared ? "shared" : skew ? "per_sequence_unaligned" : "per_sequence").p("data", data).p("dtype", "f32").str(),
                  [T = T, Hi = Hi, L = L, k = k, shared = shared, data = data, skew = skew] { indexer_select_case(T, Hi, L, k, shared, data, skew); });
  register_case("indexer", "indexer_select_negative_control(fault=indexer_no_bound,t=3,hi=32,L=20000,k=2048,data=edge)",
                [] { indexer_select_case(3, 32, 20000, 2048, false, "edge", 0, true); });
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
