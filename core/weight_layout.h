// mlaconf: the glm-dsa weight layout: every tensor's llama.cpp name and shape (ne order).
//
// One table serves four users: `synth` writes exactly these tensors, the shape check rejects a GGUF
// whose tensors disagree with its config, and the reference and the CUDA pipeline look weights up by
// these names. Shapes follow llama.cpp's converter (ne0 fastest):
//   attn_q_b       {q_lora, H*(nope+rope)}, per head [nope | rope]
//   attn_kv_a_mqa  {hidden, kv_lora+rope} = [latent | k_rope]
//   attn_k_b       {nope, kv_lora, H}       (W_UK^T per head)
//   attn_v_b       {kv_lora, v_head, H}     (W_UV per head)
//   ffn_*_exps     {in, out, E}
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ggml_types.h"
#include "core/model_config.h"

namespace mlaconf {

class GgufFile;

enum class WeightRole {
  Embedding,   // token_embd
  Norm,        // RMSNorm / LayerNorm weight or bias, router bias: always F32
  Router,      // ffn_gate_inp: F32
  Matrix,      // a 2-D projection
  PerHead,     // attn_k_b, attn_v_b: 3-D, one matrix per head
  Experts,     // ffn_*_exps: 3-D, one matrix per expert
  Output,      // output
};

struct TensorSpec {
  std::string name;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  WeightRole role = WeightRole::Matrix;
  int layer = -1;  // -1 for global tensors
};

// Tensor names, in one place.
namespace wname {
std::string blk(int64_t layer, const char* suffix);  // "blk.3.attn_q_a.weight"
inline constexpr const char* kTokenEmbd = "token_embd.weight";
inline constexpr const char* kOutputNorm = "output_norm.weight";
inline constexpr const char* kOutput = "output.weight";
// Per-layer suffixes.
inline constexpr const char* kAttnNorm = "attn_norm.weight";
inline constexpr const char* kQA = "attn_q_a.weight";
inline constexpr const char* kQANorm = "attn_q_a_norm.weight";
inline constexpr const char* kQB = "attn_q_b.weight";
inline constexpr const char* kKvA = "attn_kv_a_mqa.weight";
inline constexpr const char* kKvANorm = "attn_kv_a_norm.weight";
inline constexpr const char* kKB = "attn_k_b.weight";
inline constexpr const char* kVB = "attn_v_b.weight";
inline constexpr const char* kAttnOut = "attn_output.weight";
inline constexpr const char* kIdxQB = "indexer.attn_q_b.weight";
inline constexpr const char* kIdxK = "indexer.attn_k.weight";
inline constexpr const char* kIdxKNorm = "indexer.k_norm.weight";
inline constexpr const char* kIdxKNormB = "indexer.k_norm.bias";
inline constexpr const char* kIdxProj = "indexer.proj.weight";
inline constexpr const char* kFfnNorm = "ffn_norm.weight";
inline constexpr const char* kFfnGate = "ffn_gate.weight";
inline constexpr const char* kFfnUp = "ffn_up.weight";
inline constexpr const char* kFfnDown = "ffn_down.weight";
inline constexpr const char* kGateInp = "ffn_gate_inp.weight";
inline constexpr const char* kExpProbsB = "exp_probs_b.bias";
inline constexpr const char* kGateExps = "ffn_gate_exps.weight";
inline constexpr const char* kUpExps = "ffn_up_exps.weight";
inline constexpr const char* kDownExps = "ffn_down_exps.weight";
inline constexpr const char* kGateShexp = "ffn_gate_shexp.weight";
inline constexpr const char* kUpShexp = "ffn_up_shexp.weight";
inline constexpr const char* kDownShexp = "ffn_down_shexp.weight";
}  // namespace wname

// Every tensor the forward pass reads, in llama.cpp's file order (globals, then layers 0..n-1).
// MTP (nextn) layers are not listed: no forward pass here runs them.
std::vector<TensorSpec> model_tensor_specs(const ModelConfig& c);
// The specs of one layer only.
std::vector<TensorSpec> layer_tensor_specs(const ModelConfig& c, int64_t layer);

// The type rule the readers apply to one tensor (norms and the router are F32): InputError naming `file`.
// synth applies it too, before writing, so it never writes a file the readers refuse.
void check_weight_type(const std::string& file, const TensorSpec& s, GgmlType type);

// Checks that `f` holds every tensor of model_tensor_specs with the expected shape (and F32 for norms
// and the router). Raises InputError naming the first tensor that is missing or mis-shaped.
void validate_weights(const GgufFile& f, const ModelConfig& c);

}  // namespace mlaconf
