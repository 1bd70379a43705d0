// mlaconf <-> llama.cpp: the name table (see tensor_map.h and docs/LLAMA_CPP.md).
#include "tools/llama_cpp/tensor_map.h"

#include <cstring>

namespace mlaconf::llamacpp {

const std::vector<MapEntry>& tensor_map() {
  using T = Take;
  // name               ops                          layer  dataset              take
  static const std::vector<MapEntry> m = {
      {"embd", "", false, "layers/0/input_hidden", T::Rows, "token embedding rows (get_rows of token_embd)"},
      {"attn_norm", "MUL", true, "attn_norm_out", T::Rows, "RMSNorm(input) * attn_norm.weight"},
      {"qr", "MUL_MAT", true, "q_a", T::Rows, "attn_q_a x"},
      {"qr", "MUL", true, "q_a_norm", T::Rows, "RMSNorm(q_a) * attn_q_a_norm.weight"},
      {"q", "MUL_MAT", true, "q_b", T::Rows, "attn_q_b cq, per head [nope | rope], before RoPE"},
      {"q_pe", "ROPE", true, "q_pe_rope", T::Rows, "q_pe after RoPE [R, H, T]"},
      {"kv_cmpr_pe", "MUL_MAT", true, "kv_a", T::Rows, "attn_kv_a_mqa x = [latent | k_pe]"},
      {"kv_cmpr", "MUL", true, "kv_latent", T::Rows, "RMSNorm(kv_a[:L]) * attn_kv_a_norm.weight"},
      {"k_pe", "ROPE", true, "k_pe_rope", T::Rows, "k_pe after RoPE [R, 1, T]"},
      {"Kcur", "CONCAT", true, "latent_cache", T::CacheRows, "[c | k_pe_rope] of the pass, before the f16 cache store"},
      {"Qcur", "CONCAT", true, "q_absorbed", T::Rows, "[W_UK^T q_nope | q_pe_rope] [C, H, T]"},
      {"indexer_q", "ROPE", true, "indexer_q", T::Rows, "indexer q after RoPE, before the Hadamard rotation [Di, Hi, T]"},
      {"indexer_k", "ROPE", true, "indexer_k", T::CacheRows, "indexer k after LayerNorm and RoPE, before the Hadamard rotation"},
      {"indexer_weights", "MUL_MAT", true, "indexer_weights", T::Rows, "indexer.proj x, before the (Hi Di)^-1/2 scale"},
      {"indexer_score", "LIGHTNING_INDEXER|ADD", true, "indexer_scores", T::CropKeys,
       "masked scores [n_kv, T] (fused op, or the unfused path's last node: + mask)"},
      {"top_k", "", true, "indexer_topk", T::TopK, "ggml_top_k of the scores: cache cells [k', T], unordered"},
      {"kqv_out", "", true, "attn_v_out", T::Rows, "attention output after W_UV, before attn_output [H*D, T]"},
      {"ffn_norm", "MUL", true, "ffn_norm_out", T::Rows, "RMSNorm(ffn_inp) * ffn_norm.weight"},
      {"ffn_moe_logits", "MUL_MAT", true, "router_logits", T::Rows, "ffn_gate_inp x"},
      {"ffn_moe_topk", "", true, "router_ids", T::RouterIds, "selected experts [U, T], selection order"},
      {"ffn_moe_weights", "GET_ROWS", true, "router_weights", T::RouterOrder, "sigmoid probs of the selected experts"},
      {"ffn_moe_weights_norm", "", true, "router_weights", T::RouterOrder, "normalized to sum 1"},
      {"ffn_moe_weights_scaled", "", true, "router_weights", T::RouterOrder, "times expert_weights_scale"},
      {"ffn_moe_down", "MUL_MAT_ID", true, "expert_out", T::RouterOrder, "each selected expert's output, unweighted [E, U, T]"},
      {"ffn_shexp", "", true, "shared_expert_out", T::Rows, "shared expert output"},
      {"ffn_out", "", true, "mlp_out", T::Rows, "MoE (routed + shared) or dense MLP output"},
      {"l_out", "", true, "output_hidden", T::Rows, "layer output (residual stream)"},
      {"result_norm", "", false, "final_norm", T::Rows, "output_norm of the last layer's output"},
      {"result_output", "", false, "logits", T::Rows, "lm head [V, T]"},
  };
  return m;
}

std::pair<std::string, int> split_name(const std::string& name) {
  const size_t d = name.rfind('-');
  if (d == std::string::npos || d + 1 >= name.size() || d + 7 < name.size()) return {name, -1};
  int l = 0;
  for (size_t i = d + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return {name, -1};
    l = l * 10 + (name[i] - '0');
  }
  return {name.substr(0, d), l};
}

const MapEntry* find_entry(const std::string& base, int layer, const std::string& op) {
  for (const MapEntry& e : tensor_map()) {
    if (base != e.name || (layer >= 0) != e.per_layer) continue;
    if (!*e.ops) return &e;
    const char* s = e.ops;
    while (*s) {
      const char* bar = std::strchr(s, '|');
      const size_t n = bar ? static_cast<size_t>(bar - s) : std::strlen(s);
      if (op.size() == n && op.compare(0, n, s, n) == 0) return &e;
      s += n + (bar ? 1 : 0);
    }
  }
  return nullptr;
}

}  // namespace mlaconf::llamacpp
