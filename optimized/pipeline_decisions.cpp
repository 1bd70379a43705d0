// mlaconf optimized: the decisions of a forward pass (the indexer's top-k, the router's experts): our own
// recorded for the trace (with the top-k's tie flags and gaps, and under the names of the layers that share a
// selection), and forced decisions (core/decisions.h) checked and put in place of ours.
#include "optimized/pipeline_impl.h"

namespace mlaconf::cuda {

void Pipeline::Impl::topk_extras(const std::vector<float>& s, int64_t T, int64_t Lkv, int64_t K, std::vector<int32_t>& tie,
                                 std::vector<double>& gap) {
  tie.assign(T, 0);
  gap.assign(T, std::numeric_limits<double>::quiet_NaN());
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> v;
    for (int64_t i = 0; i < Lkv; ++i)
      if (std::isfinite(s[t * Lkv + i])) v.push_back(s[t * Lkv + i]);
    if ((int64_t)v.size() <= K) continue;
    std::nth_element(v.begin(), v.begin() + K, v.end(), std::greater<float>());
    const float next = v[K];
    const float kth = *std::min_element(v.begin(), v.begin() + K);
    gap[t] = (double)kth - (double)next;
    tie[t] = kth == next;
  }
}

void Pipeline::Impl::record_topk_extras(int64_t l, const float* d_scores, int64_t T, int64_t Lkv, int64_t K) {
  const bool want_tie = wants(l, op::kIndexerTopkTie), want_gap = wants(l, op::kIndexerTopkGap);
  if (!tr) return;  // kept for the layers that share this selection even when this layer records neither
  std::vector<float> s(T * Lkv);
  copy_to_host(s.data(), d_scores, s.size() * 4);
  std::vector<int32_t> tie;
  std::vector<double> gap;
  topk_extras(s, T, Lkv, K, tie, gap);
  if (want_tie) tr->record_i32((int)l, op::kIndexerTopkTie, tie.data(), {T});
  if (want_gap) tr->record((int)l, op::kIndexerTopkGap, gap.data(), {T});
  own_tie[l] = std::move(tie);  // for the layers that share this selection
  own_gap[l] = std::move(gap);
}

// Our own selection (on the device, [T, K]) kept for the layers that share it (recorded under their names too).
void Pipeline::Impl::record_own_topk(int64_t l, const int32_t* d_top, int64_t T, int64_t K) {
  if (!tr) return;
  std::vector<int32_t>& top = own_topk[l];
  top.resize(T * K);
  copy_to_host(top.data(), d_top, top.size() * 4);
  if (wants(l, op::kIndexerTopk)) tr->record_i32((int)l, op::kIndexerTopk, top.data(), {T, K});
}

// A layer that shares its source's selection records it under its own name, as the reference does.
void Pipeline::Impl::record_shared_selection(int64_t l, int64_t src, int64_t T, int64_t K) {
  if (wants(l, op::kIndexerTopk) && own_topk.count(src)) tr->record_i32((int)l, op::kIndexerTopk, own_topk[src].data(), {T, K});
  if (wants(l, op::kIndexerTopkTie) && own_tie.count(src)) tr->record_i32((int)l, op::kIndexerTopkTie, own_tie[src].data(), {T});
  if (wants(l, op::kIndexerTopkGap) && own_gap.count(src)) tr->record((int)l, op::kIndexerTopkGap, own_gap[src].data(), {T});
}

// Forced selections replace ours for attention (ours were recorded before): each entry a causal key position or -1.
void Pipeline::Impl::force_topk(int64_t l, int64_t T, int64_t K, DeviceBuffer& top) {
  const int32_t* fk = forced ? forced->topk_of((int)l, T, K) : nullptr;
  if (!fk) return;
  for (int64_t i = 0; i < T * K; ++i)
    if (fk[i] < -1 || fk[i] > n_past + i / K)
      throw InputError("forced indexer_topk of layer " + std::to_string(l) + ", row " + std::to_string(i / K) + ": " +
                       std::to_string(fk[i]) + " is not a causal key position");
  top.upload(fk, (size_t)T * K * 4);
}

// Forced expert ids replace ours, with their own weights (the gap stays ours).
void Pipeline::Impl::force_experts(int64_t l, int64_t T, Route& r) const {
  const int64_t nE = c.n_expert, k = c.n_expert_used;
  const int32_t* fe = forced ? forced->experts_of((int)l, T, k) : nullptr;
  if (!fe) return;
  for (int64_t i = 0; i < T * k; ++i) {
    if (fe[i] < 0 || fe[i] >= nE)
      throw InputError("forced router_ids of layer " + std::to_string(l) + ": " + std::to_string(fe[i]) + " is not an expert id");
    r.ids[i] = fe[i];
  }
  route_weights(l, r, T);
}

}  // namespace mlaconf::cuda
