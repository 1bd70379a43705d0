// suites/reference: the single-op functions the CUDA kernels are tested against, on hand-built inputs
// whose answers are known: RoPE layouts, the indexer top-k tie rule and diagnostics, group-limited
// routing, the sparse MLA contract (-1 slots, empty selections), norms.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "suites/common/case_registry.h"
#include "reference/indexer.h"
#include "reference/mla.h"
#include "reference/moe.h"
#include "reference/ops.h"

namespace mlaconf::test {
namespace {

using ref::Mat;
using ref::MatI;
using ref::Vec;

Mat<double> randn(int64_t r, int64_t c, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  Mat<double> m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = n(g);
  return m;
}

// RoPE: interleaved rotates (2i, 2i+1), NeoX rotates (i, i+d/2); both by pos * theta^(-2i/d).
void rope_layouts() {
  const int64_t d = 8, pos = 3;
  ref::RopeParams p;
  p.dim = d;
  p.theta = 100.0;
  Eigen::VectorXd f = ref::rope_inv_freq(p);
  ASSERT_EQ(f.size(), d / 2);
  for (int64_t i = 0; i < d / 2; ++i) EXPECT_DOUBLE_EQ(f[i], std::pow(100.0, -2.0 * i / d));
  for (int64_t i = 0; i < d / 2; ++i) {
    const double a = pos * f[i];
    // Interleaved: a unit vector at 2i goes to (cos, sin) at (2i, 2i+1).
    Mat<double> x = Mat<double>::Zero(1, d + 2);
    x(0, 2 + 2 * i) = 1.0;  // col0 = 2: the slice starts inside the row
    ref::rope_inplace<double>(x, 2, &pos, f, ref::RopeStyle::Interleaved);
    EXPECT_NEAR(x(0, 2 + 2 * i), std::cos(a), 1e-15);
    EXPECT_NEAR(x(0, 2 + 2 * i + 1), std::sin(a), 1e-15);
    EXPECT_EQ(x(0, 0), 0.0);
    // NeoX: a unit vector at i goes to (cos, sin) at (i, i + d/2).
    Mat<double> y = Mat<double>::Zero(1, d);
    y(0, i) = 1.0;
    ref::rope_inplace<double>(y, 0, &pos, f, ref::RopeStyle::NeoX);
    EXPECT_NEAR(y(0, i), std::cos(a), 1e-15);
    EXPECT_NEAR(y(0, i + d / 2), std::sin(a), 1e-15);
  }
  // Relative position: <R(m) q, R(n) k> depends on m - n only; the two styles are different maps.
  Mat<double> q = randn(1, d, 1), k = randn(1, d, 2);
  auto dot_at = [&](int64_t m, int64_t n, ref::RopeStyle s) {
    Mat<double> a = q, b = k;
    ref::rope_inplace<double>(a, 0, &m, f, s);
    ref::rope_inplace<double>(b, 0, &n, f, s);
    return a.row(0).dot(b.row(0));
  };
  EXPECT_NEAR(dot_at(7, 2, ref::RopeStyle::Interleaved), dot_at(15, 10, ref::RopeStyle::Interleaved), 1e-12);
  EXPECT_NEAR(dot_at(7, 2, ref::RopeStyle::NeoX), dot_at(15, 10, ref::RopeStyle::NeoX), 1e-12);
  EXPECT_GT(std::abs(dot_at(7, 2, ref::RopeStyle::NeoX) - dot_at(7, 2, ref::RopeStyle::Interleaved)), 1e-3)
      << "negative control: the two layouts must not agree";
}

void norms() {
  Mat<double> x(2, 4);
  x << 1, 2, 3, 4, -2, 0, 2, 4;
  Vec<double> w(4), b(4);
  w << 1, 2, 0.5, 1;
  b << 0.1, -0.1, 0, 1;
  Mat<double> r = ref::rmsnorm<double>(x, w, 1e-5);
  const double ms = (1 + 4 + 9 + 16) / 4.0;
  EXPECT_NEAR(r(0, 1), 2 * 2 / std::sqrt(ms + 1e-5), 1e-15);
  Mat<double> l = ref::layernorm<double>(x, w, b, 1e-6);
  // row 1: mean 1, var (9+1+1+9)/4 = 5
  EXPECT_NEAR(l(1, 3), 1 * (4 - 1) / std::sqrt(5 + 1e-6) + 1, 1e-15);
  EXPECT_NEAR(l(1, 0), 1 * (-2 - 1) / std::sqrt(5 + 1e-6) + 0.1, 1e-15);
}

// Top-k: the k highest; equal scores go to the lower index; fewer causal keys than k: all of them.
void topk_rule() {
  const double ninf = -INFINITY;
  Mat<double> s(3, 6);
  s << 1, 3, 3, 2, 3, ninf,   // ties at 3: lower indices 1, 2 win over 4; k-th == (k+1)-th -> tie
      5, 1, 4, 4, 0, 2,       // 0 (5), then 4 at 2 and 3: 2 wins; gap 4 - 4 = 0, tie
      0.5, 0.25, ninf, ninf, ninf, ninf;  // two causal keys < k
  ref::TopK t = ref::topk_lower_index<double>(s, 2);
  EXPECT_EQ(t.idx(0, 0), 1);
  EXPECT_EQ(t.idx(0, 1), 2);
  EXPECT_EQ(t.tie[0], 1);
  EXPECT_EQ(t.gap[0], 0.0);
  EXPECT_EQ(t.idx(1, 0), 0);
  EXPECT_EQ(t.idx(1, 1), 2);
  EXPECT_EQ(t.tie[1], 1);
  EXPECT_EQ(t.idx(2, 0), 0);
  EXPECT_EQ(t.idx(2, 1), 1);
  EXPECT_TRUE(std::isnan(t.gap[2]));
  EXPECT_EQ(t.tie[2], 0);
  ref::TopK t3 = ref::topk_lower_index<double>(s, 3);
  EXPECT_EQ(t3.idx(2, 2), -1) << "-1 padded";
  EXPECT_EQ(t3.idx(0, 0), 1);
  EXPECT_EQ(t3.idx(0, 2), 4);
  EXPECT_NEAR(t3.gap[0], 1.0, 0);  // 3 - 2
  EXPECT_EQ(t3.tie[0], 0);
}

// Indexer scores: Σ_h w[s,h] (Hi Di)^-1/2 ReLU(q[s,h]·k[t]), -inf for t > pos0 + s.
void indexer_score_formula() {
  const int64_t Hi = 3, Di = 4, T = 2, L = 5, pos0 = 2;
  Mat<double> q = randn(T, Hi * Di, 3), k = randn(L, Di, 4), w = randn(T, Hi, 5);
  Mat<double> s = ref::indexer_scores<double>(q, k, w, Hi, pos0);
  for (int64_t a = 0; a < T; ++a)
    for (int64_t t = 0; t < L; ++t) {
      if (t > pos0 + a) {
        EXPECT_TRUE(std::isinf(s(a, t)) && s(a, t) < 0);
        continue;
      }
      double want = 0;
      for (int64_t h = 0; h < Hi; ++h)
        want += w(a, h) / std::sqrt(double(Hi * Di)) * std::max(0.0, q.row(a).segment(h * Di, Di).dot(k.row(t)));
      EXPECT_NEAR(s(a, t), want, 1e-14);
    }
}

// Group-limited routing: a group's score is the sum of its top two; experts outside the kept groups
// are never chosen even when their own score is higher. Weights: sigmoid without the bias.
void router_groups() {
  ref::RouterParams p;
  p.n_expert = 8;
  p.n_used = 2;
  p.n_group = 4;  // groups {0,1} {2,3} {4,5} {6,7}
  p.n_group_used = 2;
  p.norm = true;
  p.scale = 2.0;
  // Probabilities chosen through logits; group sums: g0 = .9+.1, g1 = .6+.6, g2 = .55+.5, g3 = .2+.2
  auto logit = [](double pr) { return std::log(pr / (1 - pr)); };
  Mat<double> lg(1, 8);
  const double pr[8] = {0.9, 0.1, 0.6, 0.6, 0.55, 0.5, 0.2, 0.2};
  for (int e = 0; e < 8; ++e) lg(0, e) = logit(pr[e]);
  Vec<double> bias = Vec<double>::Zero(8);
  ref::Route<double> r = ref::moe_route<double>(lg, bias, p);
  // Kept groups: g1 (1.2), g2 (1.05); g0 (1.0) dropped although expert 0 is the best single one.
  EXPECT_EQ(r.ids(0, 0), 2);
  EXPECT_EQ(r.ids(0, 1), 3);
  EXPECT_NEAR(r.weights(0, 0), 0.6 / 1.2 * 2.0, 1e-12);
  // Ungrouped (negative control): expert 0 must come back.
  ref::RouterParams flat = p;
  flat.n_group = 1;
  flat.n_group_used = 1;
  ref::Route<double> rf = ref::moe_route<double>(lg, bias, flat);
  EXPECT_EQ(rf.ids(0, 0), 0);
  // The bias steers selection only: +0.5 on expert 5 selects it, its weight stays sigmoid = 0.5.
  bias[5] = 0.5;
  ref::Route<double> rb = ref::moe_route<double>(lg, bias, p);
  EXPECT_EQ(rb.ids(0, 0), 2);  // ties 0.6 vs 0.6 go to the lower id, then 5 (1.0) is first
  EXPECT_EQ(rb.ids(0, 1), 5);
  EXPECT_NEAR(rb.weights(0, 1), 0.5 / (0.6 + 0.5) * 2.0, 1e-12);
  // Without normalization: weight = sigmoid * scale.
  ref::RouterParams nn = p;
  nn.norm = false;
  ref::Route<double> rn = ref::moe_route<double>(lg, Vec<double>::Zero(8), nn);
  EXPECT_NEAR(rn.weights(0, 0), 0.6 * 2.0, 1e-12);
}

// Sparse MLA contract: -1 slots skipped, an empty selection gives zeros, one index gives that latent,
// and absorbed == naive on random data.
void sparse_mla_contract() {
  const int64_t H = 3, dl = 16, R = 8, dn = 6, dv = 5, L = 10;
  Mat<double> cache = randn(L, dl + R, 7);
  Mat<double> qn = randn(H, dn, 8), qp = randn(H, R, 9);
  std::vector<Mat<double>> kb, vb;
  for (int h = 0; h < H; ++h) {
    kb.push_back(randn(dl, dn, 10 + h));
    vb.push_back(randn(dv, dl, 20 + h));
  }
  Mat<double> q = ref::absorb_query<double>(qn, qp, kb);
  ASSERT_EQ(q.cols(), dl + R);
  std::vector<int32_t> none{-1, -1, -1};
  Mat<double> z = ref::sparse_mla_absorbed<double>(q, cache, none.data(), 3, dl, 0.25);
  EXPECT_EQ(z.rows(), H);
  EXPECT_EQ(z.cols(), dl);
  EXPECT_EQ(z.norm(), 0.0);
  std::vector<int32_t> one{-1, 4, -1};
  Mat<double> o1 = ref::sparse_mla_absorbed<double>(q, cache, one.data(), 3, dl, 0.25);
  for (int h = 0; h < H; ++h) EXPECT_NEAR((o1.row(h) - cache.row(4).head(dl)).norm(), 0.0, 1e-14);
  std::vector<int32_t> sel{0, 3, -1, 7, 9, 2};
  Mat<double> oa = ref::apply_v_up<double>(ref::sparse_mla_absorbed<double>(q, cache, sel.data(), 6, dl, 0.3), vb);
  Mat<double> on = ref::sparse_mla_naive<double>(qn, qp, cache, sel.data(), 6, kb, vb, 0.3);
  EXPECT_LE((oa - on).norm() / on.norm(), 1e-14);
  std::vector<int32_t> bad{0, 10};
  EXPECT_THROW(ref::sparse_mla_absorbed<double>(q, cache, bad.data(), 2, dl, 0.3), std::out_of_range);
}


struct Registrar {
  Registrar() {
    register_case("reference", "op_rope(styles=interleaved+neox,d=8,theta=100)", rope_layouts);
    register_case("reference", "op_norms(rmsnorm+layernorm)", norms);
    register_case("reference", "op_topk(rule=lower_index,k=2+3)", topk_rule);
    register_case("reference", "op_indexer_scores(Hi=3,Di=4,T=2,L=5,pos0=2)", indexer_score_formula);
    register_case("reference", "op_router(experts=8,used=2,groups=4/2)", router_groups);
    register_case("reference", "op_sparse_mla(h=3,d=24,kv_lora=16,L=10)", sparse_mla_contract);
  }
} registrar;

}  // namespace
}  // namespace mlaconf::test
