// mlaconf tools/backend: the ops of one layer that `mlaconf answer` replays, in forward order, with the
// fixture datasets each one reads and writes (names: core/trace.h). Each op runs on the EXPECTED
// fixture's own inputs, so nothing compounds, and the recorded decisions are used downstream
// (attention reads the given indexer_topk, the experts the given router_ids).
//
// latent_cache is a concatenation ([kv_latent | k_pe_rope]), not an op. Decode cases hold the whole
// cache in latent_cache / indexer_k ([S, ...]); the op writing indexer_k answers the pass's T new rows
// and keeps the S - T earlier rows of the input it was given (answered by the earlier cases).
#pragma once
#include <string>
#include <vector>

namespace mlaconf::be {

struct OpSpec {
  const char* op;                    // the op's name = its first output
  std::vector<const char*> inputs;   // datasets it reads (all required)
  std::vector<const char*> outputs;  // datasets it writes
  int moe = -1;                      // 1: MoE layers only; 0: dense layers only; -1: any
};

// Forward order within a layer (the order `compare` names the first failing op in).
inline const std::vector<OpSpec>& op_table() {
  static const std::vector<OpSpec> t = {
      {"attn_norm_out", {"input_hidden"}, {"attn_norm_out"}},
      {"q_a", {"attn_norm_out"}, {"q_a"}},
      {"q_a_norm", {"q_a"}, {"q_a_norm"}},
      {"q_b", {"q_a_norm"}, {"q_b"}},
      {"q_pe_rope", {"q_b"}, {"q_pe_rope"}},
      {"kv_a", {"attn_norm_out"}, {"kv_a"}},
      {"kv_latent", {"kv_a"}, {"kv_latent"}},
      {"k_pe_rope", {"kv_a"}, {"k_pe_rope"}},
      {"q_absorbed", {"q_b", "q_pe_rope"}, {"q_absorbed"}},
      {"indexer_q", {"q_a_norm"}, {"indexer_q"}},
      {"indexer_k", {"attn_norm_out", "indexer_k"}, {"indexer_k"}},
      {"indexer_weights", {"attn_norm_out"}, {"indexer_weights"}},
      {"indexer_scores", {"indexer_q", "indexer_k", "indexer_weights"}, {"indexer_scores"}},
      {"indexer_topk", {"indexer_scores"}, {"indexer_topk", "indexer_topk_gap", "indexer_topk_tie"}},
      {"attn_latent_out", {"q_absorbed", "latent_cache", "indexer_topk"}, {"attn_latent_out"}},
      {"attn_v_out", {"attn_latent_out"}, {"attn_v_out"}},
      {"attn_out", {"attn_v_out"}, {"attn_out"}},
      {"ffn_norm_out", {"input_hidden", "attn_out"}, {"ffn_norm_out"}},
      {"router_logits", {"ffn_norm_out"}, {"router_logits"}, 1},
      {"router_ids", {"router_logits"}, {"router_ids", "router_weights", "router_topk_gap"}, 1},
      {"expert_out", {"ffn_norm_out", "router_ids"}, {"expert_out"}, 1},
      {"shared_expert_out", {"ffn_norm_out"}, {"shared_expert_out"}, 1},
      {"mlp_out", {"ffn_norm_out"}, {"mlp_out"}, 0},
      {"mlp_out", {"expert_out", "router_weights", "shared_expert_out"}, {"mlp_out"}, 1},
      {"output_hidden", {"input_hidden", "attn_out", "mlp_out"}, {"output_hidden"}},
  };
  return t;
}

}  // namespace mlaconf::be
