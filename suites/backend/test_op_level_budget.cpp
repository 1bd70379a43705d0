// The op-level default of capture (tools/backend/op_level_budget.h): test-size models keep op-level
// datasets for every captured layer; a full-size GLM-5 layer past top_k is over the budget and gets none
// unless asked for, with one line that says how.
#include <gtest/gtest.h>

#include <vector>

#include "core/model_config.h"
#include "synth/synth.h"
#include "tools/backend/op_level_budget.h"

namespace mlaconf::backend_test {
namespace {

// The op-level datasets of one layer, written out from fixtures/SCHEMA.md's shapes (cache rows S = T).
int64_t by_hand(const ModelConfig& c, int l, int64_t T) {
  const int64_t E = c.n_embd, H = c.n_head, Q = c.q_lora_rank, L = c.kv_lora_rank, R = c.n_rot, N = c.key_length_mla,
                C = c.latent_dim(), D = c.value_length_mla, Hi = c.indexer_n_head, Di = c.indexer_head_size, X = c.n_expert,
                U = c.n_expert_used;
  int64_t per_row = E + Q + Q + H * N + H * R + C + L + R + C + H * C + H * L + H * D + E;  // attn_norm_out .. ffn_norm_out
  if (c.layer_is(LayerKind::FullIndexer, l)) per_row += Hi * Di + Di + Hi;                 // indexer_q, indexer_k, indexer_weights
  if (c.is_moe_layer(l)) per_row += X + U * E + E;                                          // router_logits, expert_out, shared_expert_out
  return per_row * T;
}

TEST(OpLevelBudget, CountsTheSchemaShapes) {
  for (const ModelConfig& c : {ModelConfig::tiny_default(), synth::preset("glm5")})
    for (int l = 0; l < c.n_layer_run(); ++l)
      for (int64_t T : {1, 7, 2304}) EXPECT_EQ(be::op_level_values(c, l, T), by_hand(c, l, T)) << "layer " << l << ", T " << T;
}

TEST(OpLevelBudget, TestModelsKeepEveryLayer) {
  const ModelConfig c = ModelConfig::tiny_default();
  std::vector<int> all;
  for (int l = 0; l < c.n_layer_run(); ++l) all.push_back(l);
  // The suites capture up to 400 tokens; bench/RESULTS.md's tiny capture 2100.
  for (int64_t T : {1, 400, 2100}) {
    const be::OpLevelDefault d = be::default_op_layers(c, all, T);
    EXPECT_EQ(d.layers, all) << T;
    EXPECT_EQ(d.note, "") << T;
  }
}

TEST(OpLevelBudget, FullSizeLayerPastTopKIsAskedForByLayer) {
  const ModelConfig c = synth::preset("glm5");
  const int l = static_cast<int>(c.n_layer_dense_lead);  // the first MoE layer
  ASSERT_TRUE(c.is_moe_layer(l));
  // docs/REAL_SIZE.md: 425 M op-level values at 2304 tokens (3.4 GB as double).
  EXPECT_NEAR(be::op_level_values(c, l, 2304) / 1e6, 425, 1);
  const be::OpLevelDefault over = be::default_op_layers(c, {l}, 2304);
  EXPECT_TRUE(over.layers.empty());
  EXPECT_NE(over.note.find("--op-layers " + std::to_string(l)), std::string::npos) << over.note;
  EXPECT_EQ(over.note.find('\n'), std::string::npos) << "one line";
  // 512 tokens of the same layer fit (94 M values, 0.76 GB as double).
  EXPECT_EQ(be::default_op_layers(c, {l}, 512).layers, std::vector<int>{l});
}

}  // namespace
}  // namespace mlaconf::backend_test
