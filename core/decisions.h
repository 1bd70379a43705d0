// mlaconf: forced discrete decisions for one forward pass.
//
// Two correct implementations can take a different discrete decision at a near-tie: the indexer's top-k
// of a query row, or the router's experts of a token. Everything downstream then differs by far more
// than rounding. To judge the continuous math alone, a backend can be made to follow another run's
// decisions: per layer, the top-k list of each query row of the pass ([T, top_k], absolute key
// positions, ascending, -1 padded, as the fixture's `indexer_topk`) and the expert ids of each token
// ([T, n_expert_used], ascending, as `router_ids`). The backend still computes and records its own
// decisions (and their gaps); it only USES the forced ones. Plumbing, not math: both halves read it.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

namespace mlaconf {

struct ForcedDecisions {
  std::map<int, std::vector<int32_t>> topk;     // layer -> [T, top_k] (full indexer layers)
  std::map<int, std::vector<int32_t>> experts;  // layer -> [T, n_expert_used] (MoE layers)

  // The rows for `layer`, or nullptr when that decision is not forced. Throws std::invalid_argument
  // when the forced array does not have rows * width entries.
  const int32_t* topk_of(int layer, int64_t rows, int64_t width) const { return find(topk, layer, rows, width); }
  const int32_t* experts_of(int layer, int64_t rows, int64_t width) const { return find(experts, layer, rows, width); }
  bool empty() const { return topk.empty() && experts.empty(); }

 private:
  static const int32_t* find(const std::map<int, std::vector<int32_t>>& m, int layer, int64_t rows, int64_t width);
};

}  // namespace mlaconf
