// mlaconf reference: the MoE router and the expert mixture.
//
//   logits = ffn_gate_inp · x                      [T, n_expert], in the model's precision   linear (ops.h)
//   s = sigmoid(logits)                            (softmax for gating func 1)               moe_route:
//   choice = s + exp_probs_b                       (selection only)
//   group limit (n_group > 1): group score = sum of its top two choices; keep n_group_used groups
//   ids = top-k(choice), lower index on ties; weights = s[ids] (no bias),
//   / (Σ + 1e-20) when expert_weights_norm, then × expert_weights_scale          (route_weights)
//   y = Σ_j weights_j · E_ids_j(x) + shared(x)     E = SwiGLU (swiglu_mlp)          moe_ffn
#pragma once
#include <cstdint>
#include <functional>
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
  // [T] group limit only (n_group > 1): the n_group_used-th minus the (n_group_used+1)-th group score. A
  // near-tie there changes every expert of the two groups at once, whatever `gap` says.
  std::vector<double> group_gap;
};

// logits [T, n_expert], bias [n_expert] (exp_probs_b; empty = none) -> the route.
template <class S>
Route<S> moe_route(const Mat<S>& logits, const Vec<S>& bias, const RouterParams& p);

// The mixing weights of given expert ids (one token's ids, ascending, as a route's): the gating
// probabilities at ids (no bias), normalized and scaled. logits [T, n_expert], ids [T, n_used] -> [T, n_used].
// moe_route uses it for its own ids; a pass with forced decisions uses it for the forced ones.
template <class S>
Mat<S> route_weights(const Mat<S>& logits, const MatI& ids, const RouterParams& p);

// One SwiGLU expert's weights, by reference (routed or shared): gate, up [F, E], down [E, F].
template <class S>
struct ExpertRef {
  const Mat<S>& gate;
  const Mat<S>& up;
  const Mat<S>& down;
};
// Routed expert e's weights. moe_ffn asks for each expert it runs exactly once, in ascending id order,
// and is done with one expert's weights before it asks for the next (a bounded cache may drop them then).
template <class S>
using ExpertSource = std::function<ExpertRef<S>(int64_t e)>;
// Routed expert e's weights for experts run side by side: moe_ffn asks for each expert it runs exactly
// once, from up to MoeRun::in_flight threads at once; `slot` (in [0, in_flight)) is the asking thread's,
// and moe_ffn is done with the weights it got for a slot before it asks again for that slot (a source may
// dequantize into one buffer per slot). Called concurrently for different slots.
template <class S>
using ExpertSlotSource = std::function<ExpertRef<S>(int64_t e, int64_t slot)>;

// How moe_ffn runs its experts. in_flight 1: one after another, each expert's products split over the
// threads (reference/threads.h). in_flight > 1: up to that many experts at once (at most threads()), each
// on one thread, dequantization and products; what a caller bounds by memory, since every expert in
// flight holds its weights. The values are the same either way, bit for bit: each expert's rows get the
// same products, and each token's weighted outputs are summed in ascending expert id after the experts
// before it are done. on_done(done, total), if set, after each expert's output has been added (done
// ascending, one call at a time, on any of the threads).
struct MoeRun {
  int64_t in_flight = 1;
  std::function<void(int64_t done, int64_t total)> on_done;
};

// The MoE FFN of T tokens (DeepSeek's MoE.forward):
//   y[t] = Σ_j weights[t,j] · E_{ids[t,j]}(x[t])  (+ shared(x[t]) when `shared` is given)
// Each used expert runs once, on all the rows routed to it (gathered, SwiGLU, scattered back); the
// weighted outputs are summed per token in ascending expert id (= slot order for a route's ascending
// ids), the shared expert's output added last. x [T, E], ids [T, K] (any order, any id ≥ 0), weights
// [T, K] -> [T, E]. Optional outputs: expert_out [T, K*E] (slot j of token t = E_{ids[t,j]}(x[t]),
// unweighted), shared_out [T, E].
template <class S>
Mat<S> moe_ffn(const Mat<S>& x, const MatI& ids, const Mat<S>& weights, const ExpertSource<S>& expert,
               const ExpertRef<S>* shared, Mat<S>* expert_out = nullptr, Mat<S>* shared_out = nullptr);
// The same, with experts in flight as `run` says (the results do not depend on it).
template <class S>
Mat<S> moe_ffn(const Mat<S>& x, const MatI& ids, const Mat<S>& weights, const ExpertSlotSource<S>& expert,
               const MoeRun& run, const ExpertRef<S>* shared, Mat<S>* expert_out = nullptr,
               Mat<S>* shared_out = nullptr);

}  // namespace mlaconf::ref
