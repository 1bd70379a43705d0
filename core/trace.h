// mlaconf: a sink for the named intermediate tensors of a forward pass.
//
// The reference and the CUDA pipeline both report what each operation consumed and produced through
// this interface; `capture` turns the records into fixture datasets. It is plumbing, not math, so it
// lives in core/ and both halves may use it. Names are the fixture schema's dataset names: the rows of
// the op registry (core/op_registry.h), which holds everything else about each; the constants below
// spell the names the producers record (a test checks each is a registry row).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace mlaconf {

class Trace {
 public:
  virtual ~Trace() = default;
  // Whether the caller should bother producing `name` for `layer` (-1 = model level). Lets a capture of
  // layer 40 skip the op-level data of layers 0..39.
  virtual bool wants(int layer, std::string_view name) const { return true; }
  // Row-major data with the given shape. Values are converted to double by the producer.
  virtual void record(int layer, std::string_view name, const double* data, const std::vector<int64_t>& shape) = 0;
  virtual void record_i32(int layer, std::string_view name, const int32_t* data, const std::vector<int64_t>& shape) = 0;
  // Work inside a layer, for a progress display: `fraction` (0..1) of layer `layer` is done, `what` says
  // where ("attention 512/2304 rows"). Called on the producer's thread between pieces of work, never
  // from inside a parallel loop. Default: ignored.
  virtual void progress(int layer, double fraction, std::string_view what) {}
};

// The per-layer dataset names (row-major, T = tokens of the pass, H = heads, E = hidden).
namespace op {
inline constexpr const char* kInputHidden = "input_hidden";        // [T, E]   layer input (residual stream)
inline constexpr const char* kAttnNormOut = "attn_norm_out";       // [T, E]   input_layernorm output x
inline constexpr const char* kQA = "q_a";                          // [T, q_lora]   q_a_proj x
inline constexpr const char* kQANorm = "q_a_norm";                 // [T, q_lora]   RMSNorm(q_a) = cq
inline constexpr const char* kQB = "q_b";                          // [T, H, nope+rope]   q_b_proj cq (before RoPE)
inline constexpr const char* kQPeRope = "q_pe_rope";               // [T, H, rope]  q_pe after RoPE
inline constexpr const char* kKvA = "kv_a";                        // [T, kv_lora+rope]   kv_a_proj x (before norm)
inline constexpr const char* kKvLatent = "kv_latent";              // [T, kv_lora]   RMSNorm(kv_a[:kv_lora]) = c
inline constexpr const char* kKPeRope = "k_pe_rope";               // [T, rope]   k_pe after RoPE
inline constexpr const char* kLatentCache = "latent_cache";        // [T, kv_lora+rope]   [c | k_pe_rope]: the 576-wide cache rows
inline constexpr const char* kQAbsorbed = "q_absorbed";            // [T, H, kv_lora+rope]   [W_UK^T q_nope | q_pe_rope]
inline constexpr const char* kIndexerQ = "indexer_q";              // [T, Hi, Di]   after RoPE
inline constexpr const char* kIndexerK = "indexer_k";              // [T, Di]   after LayerNorm and RoPE
inline constexpr const char* kIndexerWeights = "indexer_weights";  // [T, Hi]   indexer.proj x (unscaled)
inline constexpr const char* kIndexerScores = "indexer_scores";    // [T, T_kv]   -inf where t > s
inline constexpr const char* kIndexerTopk = "indexer_topk";        // i32 [T, top_k] ascending, -1 padded
inline constexpr const char* kIndexerTopkTie = "indexer_topk_tie"; // i32 [T]   1 = k-th and (k+1)-th equal
inline constexpr const char* kIndexerTopkGap = "indexer_topk_gap"; // [T]   k-th minus (k+1)-th score
inline constexpr const char* kAttnLatentOut = "attn_latent_out";   // [T, H, kv_lora]   sparse attention output, latent space
inline constexpr const char* kAttnVOut = "attn_v_out";             // [T, H, v_head]   after W_UV
inline constexpr const char* kAttnOut = "attn_out";                // [T, E]   o_proj output
inline constexpr const char* kFfnNormOut = "ffn_norm_out";         // [T, E]   post_attention_layernorm output
inline constexpr const char* kRouterLogits = "router_logits";      // [T, n_expert]   gate x (before sigmoid)
inline constexpr const char* kRouterIds = "router_ids";            // i32 [T, k]   ascending
inline constexpr const char* kRouterWeights = "router_weights";    // [T, k]   same order, scaled
inline constexpr const char* kRouterTopkGap = "router_topk_gap";   // [T]   k-th minus (k+1)-th selection score
inline constexpr const char* kRouterGroupGap = "router_group_gap";  // [T]   group-limited routing gap
inline constexpr const char* kExpertOut = "expert_out";            // [T, k, E]   each used expert's output (unweighted), router_ids order
inline constexpr const char* kSharedExpertOut = "shared_expert_out";  // [T, E]
inline constexpr const char* kMlpOut = "mlp_out";                  // [T, E]   MoE or dense MLP output
inline constexpr const char* kOutputHidden = "output_hidden";      // [T, E]   layer output (residual stream)
// Model level (layer = -1).
inline constexpr const char* kFinalNorm = "final_norm";            // [T, E]
inline constexpr const char* kLogits = "logits";                   // [T, vocab]

}  // namespace op

}  // namespace mlaconf
