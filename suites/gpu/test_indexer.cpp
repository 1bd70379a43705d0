// suites/gpu: the lightning indexer scores and the radix-select top-k against float64 / exact host code.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/faults.h"
#include "suites/gpu/gpu_test_util.h"

namespace mlaconf::gputest {
namespace {

// Host top-k: the k largest finite values, ties to the lower index (or higher, for comparison with the
// fault), ascending, -1 padded. Also reports whether the k-th and (k+1)-th values are equal.
template <class S>
std::vector<int32_t> host_topk(const S* row, int64_t L, int64_t k, bool* tie = nullptr) {
  std::vector<int32_t> order;
  for (int64_t i = 0; i < L; ++i)
    if (std::isfinite((double)row[i])) order.push_back((int32_t)i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  const int64_t keff = std::min<int64_t>(k, order.size());
  if (tie) *tie = (int64_t)order.size() > k && row[order[k - 1]] == row[order[k]];
  std::vector<int32_t> out(order.begin(), order.begin() + keff);
  std::sort(out.begin(), out.end());
  out.resize(k, -1);
  return out;
}

double jaccard(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::set<int32_t> sa, sb;
  for (auto v : a) if (v >= 0) sa.insert(v);
  for (auto v : b) if (v >= 0) sb.insert(v);
  size_t inter = 0;
  for (auto v : sa) inter += sb.count(v);
  const size_t uni = sa.size() + sb.size() - inter;
  return uni ? (double)inter / uni : 1.0;
}

struct IdxCase {
  int64_t T, Hi, Di, topk, L;
  bool batched = false;  // T sequences, each with its own L keys (indexer_scores_batched) and position
};
std::string idx_name(const IdxCase& c) {
  return "indexer_topk(t=" + std::to_string(c.T) + ",hi=" + std::to_string(c.Hi) + ",di=" + std::to_string(c.Di) +
         ",topk=" + std::to_string(c.topk) + ",L=" + std::to_string(c.L) + (c.batched ? ",keys=per_sequence" : "") +
         ",dtype=f16)";
}

// Scores and top-k of the last T positions of a context of L keys (causal), against float64.
void indexer_case(IdxCase c) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(11);
  std::vector<uint16_t> qb, kb;
  std::vector<float> q, k;
  random_half(rng, c.T * c.Hi * c.Di, 1.0f, &qb, &q);
  const int64_t n_keysets = c.batched ? c.T : 1, k_stride = c.batched ? c.L * c.Di : 0;
  random_half(rng, n_keysets * c.L * c.Di, 1.0f, &kb, &k);
  std::vector<float> w(c.T * c.Hi);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const float wscale = 1.0f / std::sqrt((float)(c.Hi * c.Di));
  for (auto& v : w) v = u(rng) * wscale;
  std::vector<int32_t> pos(c.T);
  for (int64_t t = 0; t < c.T; ++t) pos[t] = (int32_t)(c.batched ? c.L - 1 - 37 * t : c.L - c.T + t);
  auto d_q = cuda::to_device(qb), d_k = cuda::to_device(kb), d_w = cuda::to_device(w), d_pos = cuda::to_device(pos);
  cuda::DeviceBuffer d_s(c.T * c.L * 4), d_top(c.T * c.topk * 4);
  cuda::indexer_scores_batched(d_q.as<uint16_t>(), d_k.as<uint16_t>(), k_stride, d_w.as<float>(), d_pos.as<int32_t>(), c.T,
                               c.Hi, c.Di, c.L, d_s.as<float>());
  cuda::topk_rows(d_s.as<float>(), c.T, c.L, c.topk, d_top.as<int32_t>());
  cuda::synchronize();
  auto t0 = std::chrono::steady_clock::now();
  // The timed pass runs the entry point under test (the per-sequence one for batched cases).
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
  auto scores = cuda::to_host<float>(d_s, c.T * c.L);
  auto top = cuda::to_host<int32_t>(d_top, c.T * c.topk);

  // float64 reference scores.
  std::vector<double> ref(c.T * c.L);
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t s = 0; s < c.L; ++s) {
      if (s > pos[t]) {
        ref[t * c.L + s] = -INFINITY;
        continue;
      }
      double tot = 0;
      for (int64_t h = 0; h < c.Hi; ++h) {
        double d = 0;
        const float* qh = &q[(t * c.Hi + h) * c.Di];
        const float* ks = &k[t * k_stride + s * c.Di];
        for (int64_t x = 0; x < c.Di; ++x) d += (double)qh[x] * ks[x];
        tot += (double)w[t * c.Hi + h] * std::max(d, 0.0);
      }
      ref[t * c.L + s] = tot;
    }
  // Scores: masks equal, finite part NMSE <= 1e-8 (fp32 accumulation of f16 inputs).
  std::vector<float> gf;
  std::vector<double> rf;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(std::isinf(ref[i]), std::isinf(scores[i])) << "causal mask differs at " << i;
    if (!std::isinf(ref[i])) gf.push_back(scores[i]), rf.push_back(ref[i]);
  }
  const double e = nmse(gf, rf);
  EXPECT_LE(e, 1e-8) << "indexer scores NMSE";
  // Top-k: Jaccard on non-tie rows >= 0.99 against the float64 top-k; exact against the host top-k of
  // the kernel's own float scores (the selection itself must be exact, ties to the lower index).
  double jmin = 1.0;
  int tie_rows = 0;
  for (int64_t t = 0; t < c.T; ++t) {
    bool tie = false;
    auto want = host_topk(&ref[t * c.L], c.L, c.topk, &tie);
    std::vector<int32_t> got(top.begin() + t * c.topk, top.begin() + (t + 1) * c.topk);
    ASSERT_EQ(got, host_topk(&scores[t * c.L], c.L, c.topk)) << "row " << t << ": selection differs from exact top-k";
    if (tie) {
      ++tie_rows;
      continue;
    }
    jmin = std::min(jmin, jaccard(got, want));
  }
  std::printf("  %s: scores NMSE %.3e; top-k Jaccard min %.6f (%d tie rows); scores %.3f ms, top-k %.3f ms\n",
              idx_name(c).c_str(), e, jmin, tie_rows, std::chrono::duration<double, std::milli>(t1 - t0).count(),
              std::chrono::duration<double, std::milli>(t2 - t1).count());
  testing::Test::RecordProperty("jaccard_min", std::to_string(jmin));
  EXPECT_GE(jmin, 0.99);
}

// The fp32 indexer (the pipeline's): NMSE <= 1e-12 against float64 on the same fp32 inputs.
void indexer_f32_case() {
  MLACONF_REQUIRE_CUDA();
  const int64_t T = 3, Hi = 32, Di = 128, L = 5000;
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> q(T * Hi * Di), k(L * Di), w(T * Hi);
  for (auto& v : q) v = u(rng);
  for (auto& v : k) v = u(rng);
  for (auto& v : w) v = u(rng) / 64;
  std::vector<int32_t> pos = {4000, 4500, 4999};
  auto d_q = cuda::to_device(q), d_k = cuda::to_device(k), d_w = cuda::to_device(w), d_pos = cuda::to_device(pos);
  cuda::DeviceBuffer d_s(T * L * 4);
  cuda::indexer_scores_f32(d_q.as<float>(), d_k.as<float>(), d_w.as<float>(), d_pos.as<int32_t>(), T, Hi, Di, L, d_s.as<float>());
  cuda::synchronize();
  auto s = cuda::to_host<float>(d_s, T * L);
  std::vector<float> gf;
  std::vector<double> rf;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < L; ++j) {
      if (j > pos[t]) {
        ASSERT_TRUE(std::isinf(s[t * L + j]));
        continue;
      }
      double tot = 0;
      for (int64_t h = 0; h < Hi; ++h) {
        double d = 0;
        for (int64_t x = 0; x < Di; ++x) d += (double)q[(t * Hi + h) * Di + x] * k[j * Di + x];
        tot += (double)w[t * Hi + h] * std::max(d, 0.0);
      }
      gf.push_back(s[t * L + j]);
      rf.push_back(tot);
    }
  const double e = nmse(gf, rf);
  std::printf("  indexer f32: scores NMSE %.3e\n", e);
  EXPECT_LE(e, 1e-12);
}

// Exact selection on tie-heavy rows (integer scores, -inf holes, short rows): equal to the host rule.
// levels = 7: many exact ties (the multi-CTA top-k falls back to one CTA); 20000: a few copies of
// each value (its tie resolution by index runs on a handful of candidates).
void topk_exact_case(int64_t L, int64_t k, bool fault, int levels = 7) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(L * 7 + k);
  const int64_t T = 6;
  std::vector<float> s(T * L);
  for (auto& v : s) v = (float)(int64_t)(rng() % levels) - (float)(levels / 3);  // exact ties, negatives too
  for (int64_t i = 0; i < L; i += 5) s[i] = -INFINITY;
  for (int64_t i = 0; i < L; ++i) s[5 * L + i] = i < 3 ? 1.0f : -INFINITY;  // row 5: fewer finite than k
  auto d_s = cuda::to_device(s);
  cuda::DeviceBuffer d_top(T * k * 4);
  {
    cuda::ScopedFault f(fault ? cuda::Fault::TopkUpperTie : cuda::Fault::None);
    cuda::topk_rows(d_s.as<float>(), T, L, k, d_top.as<int32_t>());
    cuda::synchronize();
  }
  auto top = cuda::to_host<int32_t>(d_top, T * k);
  int bad_rows = 0;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> got(top.begin() + t * k, top.begin() + (t + 1) * k);
    bad_rows += got != host_topk(&s[t * L], L, k);
  }
  if (fault)
    EXPECT_GT(bad_rows, 0) << "the higher-index tie rule must be caught";
  else
    EXPECT_EQ(bad_rows, 0);
}

const bool registered = [] {
  for (IdxCase c : {IdxCase{4, 32, 128, 2048, 4096}, IdxCase{4, 32, 128, 2048, 32768}, IdxCase{1, 32, 128, 2048, 200000},
                    IdxCase{3, 7, 66, 37, 1001},
                    // the tensor-core path's other head count, a partial last tile, a context under one tile
                    IdxCase{5, 64, 128, 2048, 4099}, IdxCase{2, 32, 128, 8, 13},
                    // batched decode: keys per sequence (tensor-core path and SIMT path)
                    IdxCase{4, 32, 128, 2048, 9000, true}, IdxCase{3, 7, 66, 37, 1001, true}})
    register_case("indexer", idx_name(c), [c] { indexer_case(c); });
  for (auto [L, k] : {std::pair<int64_t, int64_t>{4096, 2048}, {200000, 2048}, {1001, 37}, {50, 64}})
    register_case("indexer", "topk_exact(L=" + std::to_string(L) + ",k=" + std::to_string(k) + ",ties=many)",
                  [L = L, k = k] { topk_exact_case(L, k, false); });
  register_case("indexer", "topk_exact(L=100000,k=2048,ties=few)", [] { topk_exact_case(100000, 2048, false, 20000); });
  register_case("indexer", "topk_exact(L=40000,k=3000,ties=few)", [] { topk_exact_case(40000, 3000, false, 20000); });
  register_case("indexer", "indexer_scores(t=3,hi=32,di=128,L=5000,dtype=f32)", indexer_f32_case);
  register_case("indexer", "topk_negative_control(fault=topk_upper_tie,L=4096,k=2048)", [] { topk_exact_case(4096, 2048, true); });
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
