// mlaconf reference: the MoE router (see moe.h).
#include "reference/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "reference/threads.h"

namespace mlaconf::ref {

RouterParams RouterParams::from(const ModelConfig& c) {
  RouterParams p;
  p.n_expert = c.n_expert;
  p.n_used = c.n_expert_used;
  p.n_group = c.n_expert_groups;
  p.n_group_used = c.n_group_used;
  p.norm = c.expert_weights_norm;
  p.scale = c.expert_weights_scale;
  p.gating = c.gating;
  return p;
}

namespace {
// Indices of the n largest values, stable descending (ties: lower index first).
template <class T>
std::vector<int32_t> top_indices(const std::vector<T>& v, int64_t n) {
  std::vector<int32_t> o(v.size());
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  o.resize(static_cast<size_t>(std::min<int64_t>(n, static_cast<int64_t>(o.size()))));
  return o;
}

// Gating probabilities of one token's router logits, in S: sigmoid (GLM-5) or softmax.
template <class S>
Vec<S> gating_probs(const Vec<S>& z, GatingFunc g) {
  if (g == GatingFunc::Softmax) return softmax<S>(z);
  return (S(1) / (S(1) + (-z.array()).exp())).matrix();
}
}  // namespace

template <class S>
Mat<S> route_weights(const Mat<S>& logits, const MatI& ids, const RouterParams& p) {
  const int64_t T = logits.rows(), E = logits.cols(), K = ids.cols();
  if (ids.rows() != T) throw std::invalid_argument("route_weights: ids rows differ from logits rows");
  Mat<S> w(T, K);
  for (int64_t t = 0; t < T; ++t) {
    const Vec<S> prob = gating_probs<S>(Vec<S>(logits.row(t).transpose()), p.gating);
    S sum = 0;
    for (int64_t j = 0; j < K; ++j) {
      if (ids(t, j) < 0 || ids(t, j) >= E) throw std::invalid_argument("route_weights: expert id out of range");
      sum += prob[ids(t, j)];
    }
    for (int64_t j = 0; j < K; ++j) {
      S v = prob[ids(t, j)];
      if (p.norm) v = v / (sum + static_cast<S>(1e-20));
      w(t, j) = v * static_cast<S>(p.scale);
    }
  }
  return w;
}

template <class S>
Route<S> moe_route(const Mat<S>& logits, const Vec<S>& bias, const RouterParams& p) {
  // logits [T, n_expert] -> ids, weights [T, n_used]
  const int64_t T = logits.rows(), E = logits.cols(), K = p.n_used;
  if (E != p.n_expert || K < 1 || K > E) throw std::invalid_argument("moe_route: bad expert counts");
  if (bias.size() != 0 && bias.size() != E) throw std::invalid_argument("moe_route: bias size mismatch");
  if (p.n_group < 1 || E % p.n_group != 0 || p.n_group_used < 1 || p.n_group_used > p.n_group)
    throw std::invalid_argument("moe_route: bad group counts");
  Route<S> r;
  r.ids.resize(T, K);
  r.weights.resize(T, K);
  r.gap.assign(static_cast<size_t>(T), std::numeric_limits<double>::infinity());
  if (p.n_group > 1) r.group_gap.assign(static_cast<size_t>(T), std::numeric_limits<double>::infinity());
  const S ninf = -std::numeric_limits<S>::infinity();
  for (int64_t t = 0; t < T; ++t) {
    // Gating probabilities, in S.
    const Vec<S> prob = gating_probs<S>(Vec<S>(logits.row(t).transpose()), p.gating);
    std::vector<S> choice(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) choice[e] = prob[e] + (bias.size() ? bias[e] : S(0));
    // Group limit: a group's score is the sum of its two best choices; keep n_group_used groups.
    if (p.n_group > 1) {
      const int64_t per = E / p.n_group;
      std::vector<S> gscore(static_cast<size_t>(p.n_group));
      for (int64_t g = 0; g < p.n_group; ++g) {
        std::vector<S> in(choice.begin() + g * per, choice.begin() + (g + 1) * per);
        std::vector<int32_t> best = top_indices(in, std::min<int64_t>(2, per));
        S sum = 0;
        for (int32_t i : best) sum += in[i];
        gscore[g] = sum;
      }
      std::vector<int32_t> keep = top_indices(gscore, p.n_group_used + (p.n_group_used < p.n_group ? 1 : 0));
      if (static_cast<int64_t>(keep.size()) > p.n_group_used) {
        r.group_gap[t] = static_cast<double>(gscore[keep[p.n_group_used - 1]]) - static_cast<double>(gscore[keep[p.n_group_used]]);
        keep.resize(static_cast<size_t>(p.n_group_used));
      }
      std::vector<bool> kept(static_cast<size_t>(p.n_group), false);
      for (int32_t g : keep) kept[g] = true;
      for (int64_t e = 0; e < E; ++e)
        if (!kept[e / per]) choice[e] = ninf;
    }
    std::vector<int32_t> sel = top_indices(choice, K + (K < E ? 1 : 0));
    if (static_cast<int64_t>(sel.size()) > K) {
      r.gap[t] = static_cast<double>(choice[sel[K - 1]]) - static_cast<double>(choice[sel[K]]);
      sel.resize(static_cast<size_t>(K));
    }
    std::sort(sel.begin(), sel.end());
    for (int64_t j = 0; j < K; ++j) r.ids(t, j) = sel[j];
  }
  r.weights = route_weights<S>(logits, r.ids, p);
  return r;
}

template <class S>
Mat<S> moe_ffn(const Mat<S>& x, const MatI& ids, const Mat<S>& weights, const ExpertSlotSource<S>& expert,
               const MoeRun& run, const ExpertRef<S>* shared, Mat<S>* expert_out, Mat<S>* shared_out) {
  // x [T, E], ids / weights [T, K] -> [T, E]
  const int64_t T = x.rows(), E = x.cols(), K = ids.cols();
  if (ids.rows() != T || weights.rows() != T || weights.cols() != K)
    throw std::invalid_argument("moe_ffn: ids, weights and x rows / slots differ");
  std::vector<int32_t> used(ids.data(), ids.data() + ids.size());  // the experts that run, ascending
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  if (!used.empty() && used.front() < 0) throw std::invalid_argument("moe_ffn: negative expert id");
  const int64_t n = static_cast<int64_t>(used.size());
  // rows[u]: the (token, slot) pairs routed to expert used[u], token-major.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> rows(static_cast<size_t>(n));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j)
      rows[std::lower_bound(used.begin(), used.end(), ids(t, j)) - used.begin()].emplace_back(t, j);
  if (expert_out) *expert_out = Mat<S>::Zero(T, K * E);
  Mat<S> out = Mat<S>::Zero(T, E);
  // ye[u]: expert used[u]'s outputs [rows, E], from its run until its rows have been added to out.
  std::vector<Mat<S>> ye(static_cast<size_t>(n));
  for_each_in_order(
      n, run.in_flight,
      [&](int64_t u, int64_t slot) {
        const auto& r = rows[u];
        const ExpertRef<S> ew = expert(used[u], slot);
        Mat<S> xe(static_cast<Eigen::Index>(r.size()), E);  // gathered rows [n, E]
        for (size_t i = 0; i < r.size(); ++i) xe.row(i) = x.row(r[i].first);
        ye[u] = swiglu_mlp<S>(xe, ew.gate, ew.up, ew.down);  // [n, E]
      },
      [&](int64_t u) {
        const auto& r = rows[u];
        for (size_t i = 0; i < r.size(); ++i) {
          out.row(r[i].first) += weights(r[i].first, r[i].second) * ye[u].row(i);
          if (expert_out) expert_out->row(r[i].first).segment(r[i].second * E, E) = ye[u].row(i);
        }
        ye[u] = Mat<S>();
        if (run.on_done) run.on_done(u + 1, n);
      });
  if (shared) {
    Mat<S> sh = swiglu_mlp<S>(x, shared->gate, shared->up, shared->down);  // [T, E]
    out += sh;
    if (shared_out) *shared_out = std::move(sh);
  }
  return out;
}

template <class S>
Mat<S> moe_ffn(const Mat<S>& x, const MatI& ids, const Mat<S>& weights, const ExpertSource<S>& expert,
               const ExpertRef<S>* shared, Mat<S>* expert_out, Mat<S>* shared_out) {
  const ExpertSlotSource<S> by_slot = [&](int64_t e, int64_t) { return expert(e); };
  return moe_ffn<S>(x, ids, weights, by_slot, MoeRun{}, shared, expert_out, shared_out);
}

template Mat<float> route_weights<float>(const Mat<float>&, const MatI&, const RouterParams&);
template Mat<double> route_weights<double>(const Mat<double>&, const MatI&, const RouterParams&);
template Route<float> moe_route<float>(const Mat<float>&, const Vec<float>&, const RouterParams&);
template Mat<float> moe_ffn<float>(const Mat<float>&, const MatI&, const Mat<float>&, const ExpertSource<float>&,
                                   const ExpertRef<float>*, Mat<float>*, Mat<float>*);
template Mat<double> moe_ffn<double>(const Mat<double>&, const MatI&, const Mat<double>&, const ExpertSource<double>&,
                                     const ExpertRef<double>*, Mat<double>*, Mat<double>*);
template Mat<float> moe_ffn<float>(const Mat<float>&, const MatI&, const Mat<float>&, const ExpertSlotSource<float>&,
                                   const MoeRun&, const ExpertRef<float>*, Mat<float>*, Mat<float>*);
template Mat<double> moe_ffn<double>(const Mat<double>&, const MatI&, const Mat<double>&, const ExpertSlotSource<double>&,
                                     const MoeRun&, const ExpertRef<double>*, Mat<double>*, Mat<double>*);
template Route<double> moe_route<double>(const Mat<double>&, const Vec<double>&, const RouterParams&);

}  // namespace mlaconf::ref
