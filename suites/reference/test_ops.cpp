// suites/reference: the single-op functions the CUDA kernels are tested against, on hand-built inputs
// whose answers are known: RoPE layouts, the indexer top-k tie rule and diagnostics, group-limited
// routing, the sparse MLA contract (-1 slots, empty selections), norms. Then each function Model<S>
// calls, directly, at sizes off every alignment (heads 1/3/5, top_k 5/13, -1 padding, groups of 3):
// the MLA latent and both MLA forms against the definition, the indexer's queries, keys and causal
// top-k, the router, the expert mixture.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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

// Norms at input magnitudes where eps matters (issue 37, "scale"): rows of amplitude 1e-3..1e-4, so that
// mean(x²) (3e-7..1e-8 here) is comparable to or below eps (1e-5 RMSNorm as the tiny model's GGUF says,
// 1e-6 the indexer k LayerNorm's fixed eps, 1e-6 GLM-5's rms eps). Each norm the model runs, in f64 and
// f32, against the formula written out here in long double with the eps it must use; and that formula
// with the OTHER eps must differ by far more than the bound, so a norm using a wrong eps (or none) fails.
// Covered: rmsnorm (attn / q_a / ffn / output norms), mla_latent (the kv_a norm, eps passed in),
// layernorm, indexer_keys (the indexer k LayerNorm, eps 1e-6 fixed inside).
template <class S>
void norms_small_magnitude() {
  const int64_t T = 4, D = 48, dl = 32, R = 8;
  const double bound = sizeof(S) == 8 ? 1e-13 : 2e-6;  // max relative error of an element (over the row's max)
  // y[t] = w ⊙ (x[t] - mean?) / sqrt(mean(...²) + eps) (+ b), long double, from the definition.
  auto norm_ld = [](const Mat<double>& x, const Vec<double>& w, const Vec<double>* b, double eps, bool center) {
    Mat<double> y(x.rows(), x.cols());
    for (int64_t t = 0; t < x.rows(); ++t) {
      long double mu = 0, ss = 0;
      if (center) {
        for (int64_t i = 0; i < x.cols(); ++i) mu += x(t, i);
        mu /= x.cols();
      }
      for (int64_t i = 0; i < x.cols(); ++i) ss += (x(t, i) - mu) * (x(t, i) - mu);
      const long double inv = 1.0L / std::sqrt(ss / x.cols() + static_cast<long double>(eps));
      for (int64_t i = 0; i < x.cols(); ++i)
        y(t, i) = static_cast<double>(w[i] * (x(t, i) - mu) * inv + (b ? (*b)[i] : 0.0L));
    }
    return y;
  };
  // Worst element error relative to its row's largest value.
  auto rel = [](const Mat<double>& got, const Mat<double>& want) {
    double worst = 0;
    for (int64_t t = 0; t < want.rows(); ++t) {
      const double m = want.row(t).cwiseAbs().maxCoeff();
      worst = std::max(worst, (got.row(t) - want.row(t)).cwiseAbs().maxCoeff() / m);
    }
    return worst;
  };
  const ref::RopeParams rp{.dim = R};
  const Eigen::VectorXd f = ref::rope_inv_freq(rp);
  const int64_t zeros[T] = {0, 0, 0, 0};
  for (double amp : {1e-3, 3e-4, 1e-4}) {
    const std::string at = std::string(sizeof(S) == 8 ? "f64" : "f32") + " amplitude " + std::to_string(amp);
    // Rounded to S first, so that the S path and the long double formula see the same inputs.
    const Mat<double> x = (randn(T, D, 91) * amp).cast<S>().template cast<double>();
    const Vec<double> w = (Vec<double>::Ones(D) + 0.2 * Vec<double>(randn(D, 1, 92))).cast<S>().template cast<double>();
    const Vec<double> b = (0.1 * Vec<double>(randn(D, 1, 93))).cast<S>().template cast<double>();
    for (double eps : {1e-5, 1e-6}) {
      const double other = eps == 1e-5 ? 1e-6 : 1e-5;
      const Mat<double> got = ref::rmsnorm<S>(x.cast<S>(), w.cast<S>(), eps).template cast<double>();
      EXPECT_LE(rel(got, norm_ld(x, w, nullptr, eps, false)), bound) << "rmsnorm, eps " << eps << ", " << at;
      EXPECT_GE(rel(norm_ld(x, w, nullptr, other, false), norm_ld(x, w, nullptr, eps, false)), 1e4 * bound)
          << "control: at " << at << " eps " << other << " instead of " << eps << " must show";
      EXPECT_GE(rel(norm_ld(x, w, nullptr, 0.0, false), norm_ld(x, w, nullptr, eps, false)), 1e4 * bound) << "control: no eps";
      const Mat<double> ln = ref::layernorm<S>(x.cast<S>(), w.cast<S>(), b.cast<S>(), eps).template cast<double>();
      EXPECT_LE(rel(ln, norm_ld(x, w, &b, eps, true)), bound) << "layernorm, eps " << eps << ", " << at;
      EXPECT_GE(rel(norm_ld(x, w, &b, other, true), norm_ld(x, w, &b, eps, true)), 1e4 * bound) << "control: layernorm eps";
    }
    // The latent norm (kv_a's first kv_lora values; position 0: the rope part is kept as is).
    const Mat<double> kva = (randn(T, dl + R, 94) * amp).cast<S>().template cast<double>();
    const Vec<double> kw = w.head(dl);
    const double leps = 1e-6;
    const Mat<double> lat = ref::mla_latent<S>(kva.cast<S>(), kw.cast<S>(), leps, zeros, f).template cast<double>();
    EXPECT_LE(rel(Mat<double>(lat.leftCols(dl)), norm_ld(kva.leftCols(dl), kw, nullptr, leps, false)), bound)
        << "mla_latent's kv norm, eps " << leps << ", " << at;
    // The indexer keys: LayerNorm(w_k x) with its fixed eps 1e-6 (position 0: no rotation). w_k x has the
    // amplitude of x (w_k = identity-scaled rows), so its variance sits near eps.
    Mat<double> wk = Mat<double>::Zero(D, D);
    for (int64_t i = 0; i < D; ++i) wk(i, i) = 1.0;
    const Mat<double> ki = ref::indexer_keys<S>(x.cast<S>(), wk.cast<S>(), w.cast<S>(), b.cast<S>(), zeros, f,
                                                ref::RopeStyle::Interleaved).template cast<double>();
    EXPECT_LE(rel(ki, norm_ld(x, w, &b, 1e-6, true)), bound) << "indexer_keys' k LayerNorm (eps 1e-6), " << at;
    EXPECT_GE(rel(norm_ld(x, w, &b, 1e-5, true), norm_ld(x, w, &b, 1e-6, true)), 1e4 * bound) << "control: indexer eps";
  }
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
  // The group decision's own gap: the 2nd kept group's score minus the best dropped one's (1.05 - 1.0).
  // A near-tie there swaps every expert of two groups at once, whatever the experts' top-k gap says.
  ASSERT_EQ(r.group_gap.size(), 1u);
  EXPECT_NEAR(r.group_gap[0], 1.05 - 1.0, 1e-12);
  // Ungrouped (negative control): expert 0 must come back.
  ref::RouterParams flat = p;
  flat.n_group = 1;
  flat.n_group_used = 1;
  ref::Route<double> rf = ref::moe_route<double>(lg, bias, flat);
  EXPECT_EQ(rf.ids(0, 0), 0);
  EXPECT_TRUE(rf.group_gap.empty());
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


// ---- the functions Model<S> calls, off alignment -------------------------------------------------------

double nmse_m(const Mat<double>& a, const Mat<double>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() ? (a - b).squaredNorm() / b.squaredNorm() : INFINITY;
}

// rope_heads_inplace == rope_inplace on each head's slice; values outside the slices are left alone.
void rope_heads() {
  const int64_t H = 3, Dh = 11, col0 = 3, T = 4;  // slice [3, 9) of each 11-wide head
  ref::RopeParams p;
  p.dim = 6;
  const Eigen::VectorXd f = ref::rope_inv_freq(p);
  const int64_t pos[T] = {0, 1, 17, 4099};
  const Mat<double> x0 = randn(T, H * Dh, 40);
  for (ref::RopeStyle st : {ref::RopeStyle::Interleaved, ref::RopeStyle::NeoX}) {
    Mat<double> x = x0;
    ref::rope_heads_inplace<double>(x, H, Dh, col0, pos, f, st);
    for (int64_t h = 0; h < H; ++h) {
      Mat<double> one = x0.middleCols(h * Dh, Dh);
      ref::rope_inplace<double>(one, col0, pos, f, st);
      EXPECT_EQ(Mat<double>(x.middleCols(h * Dh, Dh)), one) << "head " << h;
    }
    EXPECT_EQ(x.row(0), x0.row(0)) << "position 0 is the identity";
    EXPECT_NE(x.row(2), x0.row(2)) << "negative control: position 17 must rotate";
  }
  Mat<double> x = x0;
  EXPECT_THROW(ref::rope_heads_inplace<double>(x, H, Dh, 6, pos, f, ref::RopeStyle::Interleaved), std::invalid_argument)
      << "a slice past the head's end";
}

// mla_latent: [RMSNorm(c) | RoPE(k_pe)]: the latent part does not depend on the position, k_pe is
// rotated in interleaved pairs (norms kept, identity at 0).
void mla_latent() {
  const int64_t T = 3, dl = 10, R = 6;
  ref::RopeParams p;
  p.dim = R;
  const Eigen::VectorXd f = ref::rope_inv_freq(p);
  const Mat<double> kva = randn(T, dl + R, 41);
  const Vec<double> w = randn(dl, 1, 42);
  const int64_t pos[T] = {0, 5, 1000};
  const Mat<double> lat = ref::mla_latent<double>(kva, w, 1e-6, pos, f);
  ASSERT_EQ(lat.cols(), dl + R);
  EXPECT_EQ(Mat<double>(lat.leftCols(dl)), ref::rmsnorm<double>(kva.leftCols(dl), w, 1e-6));
  EXPECT_EQ(lat.row(0).tail(R), kva.row(0).tail(R));
  for (int64_t t = 1; t < T; ++t) {
    EXPECT_NE(lat.row(t).tail(R), kva.row(t).tail(R)) << "negative control: row " << t << " must rotate";
    for (int64_t i = 0; i < R / 2; ++i)
      EXPECT_NEAR(std::hypot(lat(t, dl + 2 * i), lat(t, dl + 2 * i + 1)),
                  std::hypot(kva(t, dl + 2 * i), kva(t, dl + 2 * i + 1)), 1e-14);
  }
  EXPECT_THROW(ref::mla_latent<double>(Mat<double>(kva.leftCols(dl + R - 2)), w, 1e-6, pos, f), std::invalid_argument);
}

// The definition of sparse MLA, scalar loops in long double, k and v expanded per selected token:
//   k_nope[h,t] = W_UK[h] c_t (kb[h]^T c_t),  v[h,t] = W_UV[h] c_t (vb[h] c_t),
//   o[s,h] = Σ_t softmax_t(scale (q_nope·k_nope + q_pe·k_pe)) v[h,t]  over the valid entries of idx[s].
// `drop_last` leaves out each row's last valid entry: the negative control for a dropped tail.
Mat<double> mla_definition(const Mat<double>& q, const Mat<double>& cache, const MatI& idx, const std::vector<Mat<double>>& kb,
                           const std::vector<Mat<double>>& vb, double scale, bool drop_last = false) {
  const int64_t T = q.rows(), H = kb.size(), dl = kb[0].rows(), dn = kb[0].cols(), R = cache.cols() - dl, dv = vb[0].rows();
  Mat<double> out = Mat<double>::Zero(T, H * dv);
  for (int64_t s = 0; s < T; ++s) {
    std::vector<int32_t> ids;
    for (int64_t j = 0; j < idx.cols(); ++j)
      if (idx(s, j) >= 0) ids.push_back(idx(s, j));
    if (drop_last && !ids.empty()) ids.pop_back();
    for (int64_t h = 0; h < H; ++h) {
      std::vector<long double> sc;
      for (int32_t t : ids) {
        long double d = 0;
        for (int64_t i = 0; i < dn; ++i) {
          long double k = 0;
          for (int64_t c = 0; c < dl; ++c) k += (long double)kb[h](c, i) * cache(t, c);
          d += k * q(s, h * (dn + R) + i);
        }
        for (int64_t r = 0; r < R; ++r) d += (long double)q(s, h * (dn + R) + dn + r) * cache(t, dl + r);
        sc.push_back(d * scale);
      }
      if (sc.empty()) continue;
      const long double mx = *std::max_element(sc.begin(), sc.end());
      long double z = 0;
      for (auto& v : sc) z += (v = std::exp(v - mx));
      for (int64_t o = 0; o < dv; ++o) {
        long double acc = 0;
        for (size_t j = 0; j < ids.size(); ++j) {
          long double v = 0;
          for (int64_t c = 0; c < dl; ++c) v += (long double)vb[h](o, c) * cache(ids[j], c);
          acc += sc[j] / z * v;
        }
        out(s, h * dv + o) = static_cast<double>(acc);
      }
    }
  }
  return out;
}

// A selection of T rows over an L-row cache: row s holds a random subset of 0..pos0+s, ascending, then
// -1 padded to n_idx, with -1 holes in between; row 0 is empty, row 1 has one entry.
MatI random_selection(int64_t T, int64_t n_idx, int64_t pos0, uint32_t seed) {
  std::mt19937 g(seed);
  MatI idx = MatI::Constant(T, n_idx, -1);
  for (int64_t s = 2; s < T; ++s) {
    std::vector<int32_t> all(static_cast<size_t>(pos0 + s + 1));
    for (size_t t = 0; t < all.size(); ++t) all[t] = static_cast<int32_t>(t);
    std::shuffle(all.begin(), all.end(), g);
    const int64_t n = std::min<int64_t>(n_idx - 1, static_cast<int64_t>(all.size()));
    std::vector<int32_t> pick(all.begin(), all.begin() + n);
    std::sort(pick.begin(), pick.end());
    int64_t j = 0;
    for (int32_t t : pick) {
      if (j == n_idx / 2) ++j;  // a -1 hole mid-row
      idx(s, j++) = t;
    }
  }
  if (T > 1) idx(1, n_idx - 1) = static_cast<int32_t>(pos0);  // one entry, in the last slot
  return idx;
}

template <class S>
Mat<S> cast(const Mat<double>& m) {
  return m.cast<S>();
}
template <class S>
std::vector<Mat<S>> cast(const std::vector<Mat<double>>& v) {
  std::vector<Mat<S>> r;
  for (const auto& m : v) r.push_back(m.cast<S>());
  return r;
}

// NMSE bound against the definition, ~10x the worst measured over these cases (both forms, every H and
// top_k; single-token functions included): f64 1.7e-31, f32 6.5e-14.
template <class S>
constexpr double kMlaBound = sizeof(S) == 8 ? 1e-30 : 3e-13;
// absorb_query (one token) against its row of absorb_query_rows: the same dot products, products of
// other shapes, so other rounding (worst measured: f64 2.0e-32, f32 3.7e-15; the bound ~10x above).
template <class S>
constexpr double kQabsBound = sizeof(S) == 8 ? 2e-31 : 4e-14;

// Both MLA forms, as Model<S> runs them (the rows functions), against the definition; each single-token
// function against its rows function; negative controls: -1 read as row 0, a dropped last entry.
template <class S>
void mla_forms_one(int64_t H, int64_t n_idx, double& worst, double& neg_min, double& worst_qabs) {
  const int64_t T = 5, L = 37, dl = 20, R = 6, dn = 7, dv = 9, pos0 = L - T;
  const double scale = 1.0 / std::sqrt(double(dn + R));
  const uint32_t seed = static_cast<uint32_t>(100 * H + n_idx);
  const Mat<double> q = randn(T, H * (dn + R), seed), cache = randn(L, dl + R, seed + 1);
  std::vector<Mat<double>> kb, vb;
  for (int64_t h = 0; h < H; ++h) {
    kb.push_back(randn(dl, dn, seed + 10 + h) * 0.3);
    vb.push_back(randn(dv, dl, seed + 20 + h) * 0.3);
  }
  const MatI idx = random_selection(T, n_idx, pos0, seed + 2);
  const Mat<double> want = mla_definition(q, cache, idx, kb, vb, scale);
  const Mat<S> qs = cast<S>(q), cs = cast<S>(cache);
  const auto kbs = cast<S>(kb), vbs = cast<S>(vb);

  const Mat<S> qabs = ref::absorb_query_rows<S>(qs, kbs, dn);
  ASSERT_EQ(qabs.cols(), H * (dl + R));
  const Mat<S> olat = ref::sparse_mla_absorbed_rows<S>(qabs, cs, idx, dl, scale);
  const Mat<S> absorbed = ref::apply_v_up_rows<S>(olat, vbs);
  const Mat<S> naive = ref::sparse_mla_naive_rows<S>(qs, cs, idx, kbs, vbs, scale);
  const double ea = nmse_m(absorbed.template cast<double>(), want), en = nmse_m(naive.template cast<double>(), want);
  worst = std::max({worst, ea, en});
  EXPECT_LE(ea, kMlaBound<S>) << "absorbed, H=" << H << " n_idx=" << n_idx;
  EXPECT_LE(en, kMlaBound<S>) << "naive, H=" << H << " n_idx=" << n_idx;
  EXPECT_EQ(absorbed.row(0).norm(), 0.0) << "an empty selection gives zeros";
  EXPECT_EQ(naive.row(0).norm(), 0.0) << "an empty selection gives zeros";
  // One entry: softmax weight 1, o = W_UV c_t exactly up to the products.
  for (int64_t h = 0; h < H; ++h)
    EXPECT_LE((olat.row(1).segment(h * dl, dl) - cs.row(pos0).head(dl)).norm(), sizeof(S) == 8 ? 1e-15 : 1e-6);

  // Negative controls, judged like the real outputs: each must be far outside the bound.
  MatI zero_fill = idx;  // -1 slots read as row 0
  for (Eigen::Index k = 0; k < zero_fill.size(); ++k) zero_fill.data()[k] = std::max(zero_fill.data()[k], 0);
  const Mat<S> bad = ref::apply_v_up_rows<S>(ref::sparse_mla_absorbed_rows<S>(qabs, cs, zero_fill, dl, scale), vbs);
  const Mat<double> tail = mla_definition(q, cache, idx, kb, vb, scale, true);
  const double e_fill = nmse_m(bad.template cast<double>(), want), e_tail = nmse_m(tail, want);
  EXPECT_GT(e_fill, 1e3 * kMlaBound<S>) << "negative control: -1 read as row 0";
  EXPECT_GT(e_tail, 1e3 * kMlaBound<S>) << "negative control: the last entry of each row dropped";
  neg_min = std::min({neg_min, e_fill, e_tail});

  // The single-token functions are the rows functions with T = 1 (rounding may differ by the product shape).
  for (int64_t s = 0; s < T; ++s) {
    Mat<S> qn(H, dn), qp(H, R);
    for (int64_t h = 0; h < H; ++h) {
      qn.row(h) = qs.row(s).segment(h * (dn + R), dn);
      qp.row(h) = qs.row(s).segment(h * (dn + R) + dn, R);
    }
    const Mat<S> qa1 = ref::absorb_query<S>(qn, qp, kbs);
    const double eq = nmse_m(Eigen::Map<const Mat<S>>(qa1.data(), 1, qa1.size()).template cast<double>(),
                             qabs.row(s).template cast<double>());
    worst_qabs = std::max(worst_qabs, eq);
    EXPECT_LE(eq, kQabsBound<S>) << "absorb_query vs absorb_query_rows, row " << s;
    const Mat<S> ol1 = ref::sparse_mla_absorbed<S>(qa1, cs, idx.row(s).data(), n_idx, dl, scale);
    const Mat<S> o1 = ref::apply_v_up<S>(ol1, vbs);
    const Mat<S> n1 = ref::sparse_mla_naive<S>(qn, qp, cs, idx.row(s).data(), n_idx, kbs, vbs, scale);
    if (s == 0) {
      EXPECT_EQ(o1.norm(), 0.0);
      EXPECT_EQ(n1.norm(), 0.0);
      continue;
    }
    const Mat<double> want_s = want.row(s);
    const double e1 = nmse_m(Eigen::Map<const Mat<S>>(o1.data(), 1, o1.size()).template cast<double>(), want_s);
    const double n1e = nmse_m(Eigen::Map<const Mat<S>>(n1.data(), 1, n1.size()).template cast<double>(), want_s);
    worst = std::max({worst, e1, n1e});
    EXPECT_LE(e1, kMlaBound<S>) << "single-token absorbed, row " << s;
    EXPECT_LE(n1e, kMlaBound<S>) << "single-token naive, row " << s;
  }
  MatI beyond = idx;
  beyond(2, 0) = static_cast<int32_t>(L);
  EXPECT_THROW(ref::sparse_mla_naive_rows<S>(qs, cs, beyond, kbs, vbs, scale), std::out_of_range);
  EXPECT_THROW(ref::sparse_mla_absorbed_rows<S>(qabs, cs, beyond, dl, scale), std::out_of_range);
}

template <class S>
void mla_forms() {
  double worst = 0, neg_min = INFINITY, worst_qabs = 0;
  for (int64_t H : {1, 3, 5})
    for (int64_t n_idx : {5, 13}) mla_forms_one<S>(H, n_idx, worst, neg_min, worst_qabs);
  std::printf("[ nmse ] MLA forms vs the definition (%s): worst %.3e, bound %.0e, negative controls >= %.3e; "
              "absorb_query vs rows %.3e (bound %.0e)\n",
              sizeof(S) == 8 ? "f64" : "f32", worst, kMlaBound<S>, neg_min, worst_qabs, kQabsBound<S>);
}

// The indexer's queries and keys: RoPE on the FIRST rope values of each head only (identity at position
// 0), keys LayerNorm'd; then scores and the causal top-k at top_k = 13 (rows shorter than 13 padded).
void indexer_qk_topk() {
  const int64_t T = 5, Hi = 3, Di = 10, R = 6, E = 12, QL = 9, pos0 = 7, K = 13;
  ref::RopeParams p;
  p.dim = R;
  const Eigen::VectorXd f = ref::rope_inv_freq(p);
  std::vector<int64_t> pos(T);
  for (int64_t s = 0; s < T; ++s) pos[s] = pos0 + s;
  const std::vector<int64_t> zeros(T, 0);
  const Mat<double> cq = randn(T, QL, 50), x = randn(T, E, 51), wq = randn(Hi * Di, QL, 52), wk = randn(Di, E, 53);
  const Vec<double> nw = randn(Di, 1, 54), nb = randn(Di, 1, 55);
  for (ref::RopeStyle st : {ref::RopeStyle::Interleaved, ref::RopeStyle::NeoX}) {
    const Mat<double> lin = ref::linear<double>(cq, wq);
    EXPECT_EQ(ref::indexer_queries<double>(cq, wq, Hi, zeros.data(), f, st), lin) << "position 0: no rotation";
    const Mat<double> qi = ref::indexer_queries<double>(cq, wq, Hi, pos.data(), f, st);
    for (int64_t h = 0; h < Hi; ++h) {
      EXPECT_EQ(Mat<double>(qi.middleCols(h * Di + R, Di - R)), Mat<double>(lin.middleCols(h * Di + R, Di - R)))
          << "values past the rope part stay";
      EXPECT_NEAR(qi.middleCols(h * Di, R).norm(), lin.middleCols(h * Di, R).norm(), 1e-12);
      EXPECT_GT((qi.middleCols(h * Di, R) - lin.middleCols(h * Di, R)).norm(), 1e-3) << "negative control: rotated";
    }
    const Mat<double> ln = ref::layernorm<double>(ref::linear<double>(x, wk), nw, nb, 1e-6);
    EXPECT_EQ(ref::indexer_keys<double>(x, wk, nw, nb, zeros.data(), f, st), ln);
    const Mat<double> ki = ref::indexer_keys<double>(x, wk, nw, nb, pos.data(), f, st);
    EXPECT_EQ(Mat<double>(ki.rightCols(Di - R)), Mat<double>(ln.rightCols(Di - R)));
  }
  // Scores of the T queries against pos0 + T keys, then top-13: row s has pos0+s+1 causal keys (8..12 < 13
  // for s < 5): all of them, -1 padded; a longer cache row set checks the kept/dropped split.
  const Mat<double> keys = randn(pos0 + T, Di, 56), w = randn(T, Hi, 57), qi = randn(T, Hi * Di, 58);
  const Mat<double> sc = ref::indexer_scores<double>(qi, keys, w, Hi, pos0);
  ref::TopK tk = ref::topk_lower_index<double>(sc, K);
  ASSERT_EQ(tk.idx.cols(), K);
  for (int64_t s = 0; s < T; ++s) {
    for (int64_t j = 0; j < K; ++j) EXPECT_EQ(tk.idx(s, j), j <= pos0 + s ? j : -1) << "row " << s << " slot " << j;
    EXPECT_TRUE(std::isnan(tk.gap[s]));
  }
  const int64_t K2 = 5;  // fewer than the causal keys: kept scores >= dropped ones, ascending, distinct
  ref::TopK t2 = ref::topk_lower_index<double>(sc, K2);
  for (int64_t s = 0; s < T; ++s) {
    double kept_min = INFINITY, dropped_max = -INFINITY;
    std::vector<bool> kept(static_cast<size_t>(sc.cols()), false);
    for (int64_t j = 0; j < K2; ++j) {
      ASSERT_GE(t2.idx(s, j), 0);
      if (j > 0) {
        EXPECT_LT(t2.idx(s, j - 1), t2.idx(s, j));
      }
      kept[t2.idx(s, j)] = true;
      kept_min = std::min(kept_min, sc(s, t2.idx(s, j)));
    }
    for (int64_t t = 0; t <= pos0 + s; ++t)
      if (!kept[t]) dropped_max = std::max(dropped_max, sc(s, t));
    EXPECT_GE(kept_min, dropped_max) << "row " << s;
    EXPECT_DOUBLE_EQ(t2.gap[s], kept_min - dropped_max);
  }
}

// Random router inputs with groups of 3 (12 experts, 4 groups, keep 2, 5 used): chosen experts lie in
// the kept groups (the two best by the sum of their top two), are the best of those, and their weights
// are route_weights of the ids; sigmoid and softmax gating.
void router_random() {
  ref::RouterParams p;
  p.n_expert = 12;
  p.n_used = 5;
  p.n_group = 4;
  p.n_group_used = 2;
  p.scale = 2.5;
  const int64_t T = 9, per = 3;
  const Mat<double> lg = randn(T, 12, 60);
  const Vec<double> bias = randn(12, 1, 61) * 0.1;
  for (GatingFunc g : {GatingFunc::Sigmoid, GatingFunc::Softmax}) {
    p.gating = g;
    ref::Route<double> r = ref::moe_route<double>(lg, bias, p);
    EXPECT_EQ(ref::route_weights<double>(lg, r.ids, p), r.weights);
    for (int64_t t = 0; t < T; ++t) {
      Vec<double> prob(12);
      double z = 0;
      for (int e = 0; e < 12; ++e) z += std::exp(lg(t, e));
      for (int e = 0; e < 12; ++e)
        prob[e] = g == GatingFunc::Sigmoid ? 1 / (1 + std::exp(-lg(t, e))) : std::exp(lg(t, e)) / z;
      const Vec<double> choice = prob + bias;
      std::vector<std::pair<double, int>> gs;
      for (int gr = 0; gr < 4; ++gr) {
        std::vector<double> v(choice.data() + gr * per, choice.data() + (gr + 1) * per);
        std::sort(v.rbegin(), v.rend());
        gs.push_back({v[0] + v[1], gr});
      }
      std::sort(gs.begin(), gs.end(), [](auto a, auto b) { return a.first > b.first; });
      auto kept = [&](int e) { return e / per == gs[0].second || e / per == gs[1].second; };
      double chosen_min = INFINITY, other_max = -INFINITY, sum = 0;
      std::vector<bool> is(12, false);
      for (int64_t j = 0; j < 5; ++j) {
        const int e = r.ids(t, j);
        if (j > 0) {
          EXPECT_LT(r.ids(t, j - 1), e);
        }
        EXPECT_TRUE(kept(e)) << "token " << t << " expert " << e << " outside the kept groups";
        is[e] = true;
        chosen_min = std::min(chosen_min, choice[e]);
        sum += prob[e];
      }
      for (int e = 0; e < 12; ++e)
        if (kept(e) && !is[e]) other_max = std::max(other_max, choice[e]);
      EXPECT_GE(chosen_min, other_max) << "token " << t;
      for (int64_t j = 0; j < 5; ++j) EXPECT_NEAR(r.weights(t, j), prob[r.ids(t, j)] / sum * 2.5, 1e-14);
    }
  }
}

// moe_ffn (routed + shared) against a per-token sum of each expert's SwiGLU on that token alone; the
// source is asked once per used expert, ascending; forced ids in any order and repeated work too.
// NMSE bounds, ~10x the worst measured: the mixture (f64 3.1e-32, f32 8.1e-15) and one expert's output
// row (a single row of E values: a larger relative error; f64 1.4e-30, f32 1.1e-13).
template <class S>
constexpr double kMoeBound = sizeof(S) == 8 ? 3e-31 : 1e-13;
template <class S>
constexpr double kSlotBound = sizeof(S) == 8 ? 1.5e-29 : 1e-12;

template <class S>
struct Expert {
  Mat<S> gate, up, down;
};

template <class S>
void moe_ffn_case() {
  const int64_t T = 7, E = 11, F = 5, NE = 6, K = 3;
  std::vector<Expert<S>> ex;
  for (int64_t e = 0; e < NE; ++e)
    ex.push_back({cast<S>(randn(F, E, 70 + e)), cast<S>(randn(F, E, 80 + e)), cast<S>(randn(E, F, 90 + e))});
  const Expert<S> sh{cast<S>(randn(F, E, 99)), cast<S>(randn(F, E, 98)), cast<S>(randn(E, F, 97))};
  const ref::ExpertRef<S> shared{sh.gate, sh.up, sh.down};
  const Mat<S> x = cast<S>(randn(T, E, 71));
  const Mat<S> w = cast<S>(randn(T, K, 72));
  MatI ids(T, K);
  std::mt19937 g(73);
  for (int64_t t = 0; t < T; ++t) {  // ascending distinct ids from 0..4 (expert 5 unused), as a route
    std::vector<int32_t> all{0, 1, 2, 3, 4};
    std::shuffle(all.begin(), all.end(), g);
    std::sort(all.begin(), all.begin() + K);
    for (int64_t j = 0; j < K; ++j) ids(t, j) = all[j];
  }
  MatI forced = ids;  // non-ascending and a repeated id
  forced(0, 0) = 4;
  forced(0, 1) = 0;
  forced(0, 2) = 4;
  for (const bool is_forced : {false, true}) {
    const MatI& use = is_forced ? forced : ids;
    std::vector<int64_t> asked;
    const ref::ExpertSource<S> src = [&](int64_t e) {
      asked.push_back(e);
      return ref::ExpertRef<S>{ex[e].gate, ex[e].up, ex[e].down};
    };
    Mat<S> eo, so;
    const Mat<S> y = ref::moe_ffn<S>(x, use, w, src, &shared, &eo, &so);
    std::vector<int64_t> want_asked(use.data(), use.data() + use.size());
    std::sort(want_asked.begin(), want_asked.end());
    want_asked.erase(std::unique(want_asked.begin(), want_asked.end()), want_asked.end());
    EXPECT_EQ(asked, want_asked) << "each used expert once, ascending";
    Mat<double> want = Mat<double>::Zero(T, E), swapped = want;
    double worst_slot = 0;
    for (int64_t t = 0; t < T; ++t) {
      const Mat<S> xt = x.row(t);
      for (int64_t j = 0; j < K; ++j) {
        const auto& ew = ex[use(t, j)];
        const Mat<double> yt = ref::swiglu_mlp<S>(xt, ew.gate, ew.up, ew.down).template cast<double>();
        want.row(t) += double(w(t, j)) * yt;
        swapped.row(t) += double(w(t, (j + 1) % K)) * yt;
        const double es = nmse_m(eo.row(t).segment(j * E, E).template cast<double>(), yt);
        worst_slot = std::max(worst_slot, es);
        EXPECT_LE(es, kSlotBound<S>) << "expert_out token " << t << " slot " << j;
      }
      const Mat<double> st = ref::swiglu_mlp<S>(xt, sh.gate, sh.up, sh.down).template cast<double>();
      want.row(t) += st;
      swapped.row(t) += st;
    }
    const double e = nmse_m(y.template cast<double>(), want);
    std::printf("[ nmse ] moe_ffn vs per-token sum (%s, %s ids): %.3e (bound %.0e); expert_out per slot worst %.3e (bound %.0e)\n",
                sizeof(S) == 8 ? "f64" : "f32", is_forced ? "forced" : "route", e, kMoeBound<S>, worst_slot, kSlotBound<S>);
    EXPECT_LE(e, kMoeBound<S>);
    EXPECT_GT(nmse_m(swapped, want), 1e3 * kMoeBound<S>) << "negative control: weights on the wrong slots";
    const Mat<S> y_noshared = ref::moe_ffn<S>(x, use, w, src, nullptr);
    EXPECT_LE(nmse_m((y - y_noshared).template cast<double>(), so.template cast<double>()), kMoeBound<S>);
  }
  MatI neg = ids;
  neg(3, 1) = -1;
  EXPECT_THROW(ref::moe_ffn<S>(x, neg, w, [&](int64_t e) { return ref::ExpertRef<S>{ex[e].gate, ex[e].up, ex[e].down}; },
                               nullptr),
               std::invalid_argument);
}

struct Registrar {
  Registrar() {
    register_case("reference", "op_rope(styles=interleaved+neox,d=8,theta=100)", rope_layouts);
    register_case("reference", "op_norms(rmsnorm+layernorm)", norms);
    register_case("reference", "op_norms_small(rmsnorm+mla_latent+layernorm+indexer_keys,amp=0.001+0.0003+0.0001,eps=0.00001+0.000001,dtype=f64)",
                  norms_small_magnitude<double>);
    register_case("reference", "op_norms_small(rmsnorm+mla_latent+layernorm+indexer_keys,amp=0.001+0.0003+0.0001,eps=0.00001+0.000001,dtype=f32)",
                  norms_small_magnitude<float>);
    register_case("reference", "op_topk(rule=lower_index,k=2+3)", topk_rule);
    register_case("reference", "op_indexer_scores(Hi=3,Di=4,T=2,L=5,pos0=2)", indexer_score_formula);
    register_case("reference", "op_router(experts=8,used=2,groups=4/2)", router_groups);
    register_case("reference", "op_sparse_mla(h=3,d=24,kv_lora=16,L=10)", sparse_mla_contract);
    register_case("reference", "op_rope_heads(heads=3,head_dim=11,col0=3,d=6)", rope_heads);
    register_case("reference", "op_mla_latent(kv_lora=10,rope=6,T=3)", mla_latent);
    register_case("reference", "op_mla_forms(h=1+3+5,topk=5+13,L=37,kv_lora=20,rope=6,nope=7,v=9,T=5,dtype=f64)",
                  mla_forms<double>);
    register_case("reference", "op_mla_forms(h=1+3+5,topk=5+13,L=37,kv_lora=20,rope=6,nope=7,v=9,T=5,dtype=f32)",
                  mla_forms<float>);
    register_case("reference", "op_indexer_qk_topk(Hi=3,Di=10,rope=6,T=5,pos0=7,topk=13+5)", indexer_qk_topk);
    register_case("reference", "op_router_random(experts=12,used=5,groups=4/2,gating=sigmoid+softmax)", router_random);
    register_case("reference", "op_moe_ffn(T=7,E=11,F=5,experts=6,used=3,shared=1,dtype=f64)", moe_ffn_case<double>);
    register_case("reference", "op_moe_ffn(T=7,E=11,F=5,experts=6,used=3,shared=1,dtype=f32)", moe_ffn_case<float>);
  }
} registrar;

}  // namespace
}  // namespace mlaconf::test
