// mlaconf reference: the MoE router and the expert mixture.
//
//   logits = ffn_gate_inp · x                      [T, n_expert], in the model's precision
//   s = sigmoid(logits)                            (softmax for gating func 1)
//   choice = s + exp_probs_b                       (selection only)
//   group limit (n_group > 1): group score = sum of its top two choices; keep n_group_used groups
//   ids = top-k(choice), lower index on ties; weights = s[ids] (no bias),
//   / (Σ + 1e-20) when expert_weights_norm, then × expert_weights_scale
//   y = Σ_j weights_j · E_ids_j(x) + shared(x)
#pragma once
#include <cstdint>
#include <vector>

#include "core/model_config.h"
#include "reference/ops.h"

namespace mlaconf::ref {

struct RouterParams {
  int64_t n_expert = 0;
  int64_t n_used = 0;
  int64_t n_group = 1;
  int64_t n_group_used = 1;
  bool norm = true;
  double scale = 1.0;
  GatingFunc gating = GatingFunc::Sigmoid;
  static RouterParams from(const ModelConfig& c);
};

template <class S>
struct Route {
  MatI ids;                  // [T, n_used] ascending expert ids
  Mat<S> weights;            // [T, n_used] same order, normalized and scaled
  std::vector<double> gap;   // [T] k-th minus (k+1)-th selection score (after the group mask; +inf if none)
};

// logits [T, n_expert], bias [n_expert] (exp_probs_b; empty = none) -> the route.
template <class S>
Route<S> moe_route(const Mat<S>& logits, const Vec<S>& bias, const RouterParams& p);

// The mixing weights of given expert ids (one token's ids, ascending, as a route's): the gating
// probabilities at ids (no bias), normalized and scaled. logits [T, n_expert], ids [T, n_used] -> [T, n_used].
// moe_route uses it for its own ids; a pass with forced decisions uses it for the forced ones.
template <class S>
Mat<S> route_weights(const Mat<S>& logits, const MatI& ids, const RouterParams& p);

}  // namespace mlaconf::ref
