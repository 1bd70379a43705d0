// mlaconf tools/backend: the size of a capture's op-level detail, and the default that bounds it.
//
// Op-level datasets (the intermediates inside a layer: q_b, q_absorbed, attn_latent_out, expert_out, ...)
// are most of a real-size capture: one full-size GLM-5 MoE layer at 2304 tokens records 425 M op-level
// values (3.4 GB as double, which is how a capture holds a layer's records until the layer is written). Unless the user names the layers (--op-layers), a capture
// keeps the op-level detail of every captured layer while the prefill's op-level values of all of them
// stay within kOpLevelBudgetBytes as double, and none beyond: test and small models keep it, real-size
// captures ask for it by layer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_config.h"

namespace mlaconf::be {

inline constexpr int64_t kOpLevelBudgetBytes = 1000000000;  // 1 GB: 125 M values as double

// Op-level values of layer l in a pass of T tokens over an empty cache (the schema's shapes, cache rows S = T).
int64_t op_level_values(const ModelConfig& c, int l, int64_t T);

struct OpLevelDefault {
  std::vector<int> layers;  // op-level layers: every captured one, or none
  std::string note;         // "" within the budget; else one line saying what was left out and how to ask for it
};
OpLevelDefault default_op_layers(const ModelConfig& c, const std::vector<int>& captured, int64_t T);

}  // namespace mlaconf::be
