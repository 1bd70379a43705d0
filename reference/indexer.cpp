// mlaconf reference: DSA lightning indexer scores and the causal top-k (see indexer.h).
#include "reference/indexer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "reference/threads.h"

namespace mlaconf::ref {

namespace {
constexpr int64_t kMinRowsPerThread = 32;  // as linear() (ops.cpp)
}  // namespace

template <class S>
Mat<S> indexer_queries(const Mat<S>& cq, const Mat<S>& w_q_b, int64_t n_head, const int64_t* pos,
                       const Eigen::VectorXd& inv_freq, RopeStyle style) {
  // cq [T, q_lora] -> [T, Hi*Di], per head [rope | nope]
  if (n_head < 1 || w_q_b.rows() % n_head != 0) throw std::invalid_argument("indexer_queries: rows of attn_q_b are not heads x Di");
  Mat<S> q = linear<S>(cq, w_q_b);
  rope_heads_inplace<S>(q, n_head, w_q_b.rows() / n_head, 0, pos, inv_freq, style);
  return q;
}

template <class S>
Mat<S> indexer_keys(const Mat<S>& x, const Mat<S>& w_k, const Vec<S>& norm_w, const Vec<S>& norm_b, const int64_t* pos,
                    const Eigen::VectorXd& inv_freq, RopeStyle style) {
  // x [T, E] -> [T, Di]
  Mat<S> k = layernorm<S>(linear<S>(x, w_k), norm_w, norm_b, 1e-6);
  rope_inplace<S>(k, 0, pos, inv_freq, style);
  return k;
}

template <class S>
Mat<S> indexer_scores(const Mat<S>& q, const Eigen::Ref<const Mat<S>>& k, const Mat<S>& w, int64_t n_head, int64_t pos0) {
  // q [T, Hi*Di], k [L, Di], w [T, Hi] -> [T, L]
  const int64_t T = q.rows(), L = k.rows(), Di = k.cols();
  if (q.cols() != n_head * Di || w.cols() != n_head || w.rows() != T)
    throw std::invalid_argument("indexer_scores: shapes do not agree");
  const S c = static_cast<S>(1.0 / std::sqrt(static_cast<double>(n_head) * static_cast<double>(Di)));
  Mat<S> score = Mat<S>::Zero(T, L);
  // Query rows in blocks over the threads (threads.h: the values do not depend on the split); within a
  // block the heads are summed in order, one [rows, L] product at a time.
  for_row_blocks(T, kMinRowsPerThread, [&](int64_t b, int64_t e) {
    auto sc = score.middleRows(b, e - b);
    for (int64_t h = 0; h < n_head; ++h) {
      Mat<S> dots = q.block(b, h * Di, e - b, Di) * k.transpose();  // [rows, L]: q_I[s,h] · k_I[t]
      Vec<S> wh = w.col(h).segment(b, e - b) * c;                   // w[s,h] (Hi Di)^-1/2
      sc.noalias() += wh.asDiagonal() * dots.cwiseMax(S(0));
    }
  });
  const S ninf = -std::numeric_limits<S>::infinity();
  for (int64_t s = 0; s < T; ++s)
    for (int64_t t = pos0 + s + 1; t < L; ++t) score(s, t) = ninf;
  return score;
}

template <class S>
TopK topk_lower_index(const Mat<S>& scores, int64_t k) {
  const int64_t T = scores.rows(), L = scores.cols();
  TopK r;
  r.k = k;
  r.idx = MatI::Constant(T, k, -1);
  r.tie.assign(static_cast<size_t>(T), 0);
  r.gap.assign(static_cast<size_t>(T), std::numeric_limits<double>::quiet_NaN());
  for_each_index(T, [&](int64_t s) {  // rows in parallel: each writes its own entries
    std::vector<int32_t> order;
    for (int64_t t = 0; t < L; ++t)
      if (std::isfinite(static_cast<double>(scores(s, t)))) order.push_back(static_cast<int32_t>(t));
    // Stable descending sort: equal scores keep ascending index order, so the lower index wins.
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return scores(s, a) > scores(s, b); });
    const int64_t n = std::min<int64_t>(k, static_cast<int64_t>(order.size()));
    if (static_cast<int64_t>(order.size()) > k && k > 0) {
      const double kth = static_cast<double>(scores(s, order[k - 1]));
      const double next = static_cast<double>(scores(s, order[k]));
      r.gap[s] = kth - next;
      r.tie[s] = kth == next ? 1 : 0;
    }
    std::vector<int32_t> keep(order.begin(), order.begin() + n);
    std::sort(keep.begin(), keep.end());
    for (int64_t j = 0; j < n; ++j) r.idx(s, j) = keep[j];
  });
  return r;
}

TopK dense_selection(int64_t T, int64_t pos0) {
  TopK r;
  r.k = pos0 + T;
  r.idx = MatI::Constant(T, r.k, -1);
  r.tie.assign(static_cast<size_t>(T), 0);
  r.gap.assign(static_cast<size_t>(T), std::numeric_limits<double>::quiet_NaN());
  for (int64_t s = 0; s < T; ++s)
    for (int64_t t = 0; t <= pos0 + s; ++t) r.idx(s, t) = static_cast<int32_t>(t);
  return r;
}

template Mat<float> indexer_scores<float>(const Mat<float>&, const Eigen::Ref<const Mat<float>>&, const Mat<float>&,
                                          int64_t, int64_t);
template Mat<double> indexer_scores<double>(const Mat<double>&, const Eigen::Ref<const Mat<double>>&,
                                            const Mat<double>&, int64_t, int64_t);
template Mat<float> indexer_queries<float>(const Mat<float>&, const Mat<float>&, int64_t, const int64_t*,
                                           const Eigen::VectorXd&, RopeStyle);
template Mat<double> indexer_queries<double>(const Mat<double>&, const Mat<double>&, int64_t, const int64_t*,
                                             const Eigen::VectorXd&, RopeStyle);
template Mat<float> indexer_keys<float>(const Mat<float>&, const Mat<float>&, const Vec<float>&, const Vec<float>&,
                                        const int64_t*, const Eigen::VectorXd&, RopeStyle);
template Mat<double> indexer_keys<double>(const Mat<double>&, const Mat<double>&, const Vec<double>&, const Vec<double>&,
                                          const int64_t*, const Eigen::VectorXd&, RopeStyle);
template TopK topk_lower_index<float>(const Mat<float>&, int64_t);
template TopK topk_lower_index<double>(const Mat<double>&, int64_t);

}  // namespace mlaconf::ref
