// mlaconf: the glm-dsa / deepseek32 hyperparameters, read from GGUF metadata into one struct.
//
// Both the reference and the CUDA pipeline size everything from this struct; nothing in the project
// may hard-code the tiny model's (or GLM-5's) dimensions.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <nlohmann/json_fwd.hpp>
#include <vector>

namespace mlaconf {

class GgufFile;

enum class Arch { GlmDsa, DeepSeek32 };

// expert_gating_func values (llama.cpp LLAMA_EXPERT_GATING_FUNC_TYPE_*).
enum class GatingFunc : int { Softmax = 1, Sigmoid = 2 };

// The kinds of layer a dataset or a step of the forward pass belongs to (ModelConfig::layer_is).
enum class LayerKind : uint8_t {
  Any,
  Moe,          // routed experts (l >= n_layer_dense_lead)
  Dense,        // a dense MLP (the leading layers)
  FullIndexer,  // computes its own indexer top-k
  SharedIndexer,  // reuses the top-k of the previous full indexer layer
  GroupedMoe,   // MoE with group-limited routing (n_expert_groups > 1)
};

struct ModelConfig {
  Arch arch = Arch::GlmDsa;
  std::string arch_name = "glm-dsa";  // the GGUF general.architecture string (key prefix)

  int64_t n_layer = 0;          // block_count (includes nextn/MTP layers)
  int64_t n_nextn_layer = 0;    // nextn_predict_layers (MTP layers at the end, not run)
  int64_t n_ctx_train = 0;      // context_length
  int64_t n_embd = 0;           // embedding_length (hidden)
  int64_t n_ff = 0;             // feed_forward_length (dense MLP intermediate)
  int64_t n_vocab = 0;

  // Attention (MLA).
  int64_t n_head = 0;
  int64_t n_head_kv = 0;        // 1: llama.cpp treats absorbed MLA as MQA
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t key_length = 0;       // kv_lora + rope = 576 for GLM-5 (the absorbed head size)
  int64_t value_length = 0;     // kv_lora = 512
  int64_t key_length_mla = 0;   // qk_nope + qk_rope = 256
  int64_t value_length_mla = 0; // v_head_dim = 256
  int64_t n_rot = 0;            // rope.dimension_count = qk_rope
  double rope_freq_base = 10000.0;
  double rms_eps = 1e-6;        // attention.layer_norm_rms_epsilon: every RMSNorm uses it

  // YaRN (deepseek32 only; absent for GLM-5). factor 0 means no scaling.
  double rope_scaling_factor = 0.0;
  int64_t rope_scaling_orig_ctx = 0;
  double rope_yarn_log_multiplier = 0.0;

  // DSA lightning indexer.
  int64_t indexer_n_head = 0;
  int64_t indexer_head_size = 0;
  int64_t indexer_top_k = 0;
  std::vector<bool> indexer_full;  // per layer: true = the layer computes its own top-k

  // MoE.
  int64_t n_layer_dense_lead = 0;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_expert_shared = 0;
  int64_t n_ff_exp = 0;
  double expert_weights_scale = 1.0;
  bool expert_weights_norm = false;
  GatingFunc gating = GatingFunc::Sigmoid;
  int64_t n_expert_groups = 1;
  int64_t n_group_used = 1;

  // Derived.
  int64_t qk_rope() const { return n_rot; }
  int64_t qk_nope() const { return key_length_mla - n_rot; }
  int64_t qk_head() const { return key_length_mla; }
  int64_t v_head() const { return value_length_mla; }
  int64_t n_layer_run() const { return n_layer - n_nextn_layer; }  // layers the forward pass runs
  // Layer kinds: the one place that spells them (indexer_full absent or short = every layer full).
  bool is_moe_layer(int64_t l) const { return l >= n_layer_dense_lead; }
  bool is_dense_layer(int64_t l) const { return !is_moe_layer(l); }
  bool is_full_indexer_layer(int64_t l) const {
    return l >= static_cast<int64_t>(indexer_full.size()) || l < 0 || indexer_full[static_cast<size_t>(l)];
  }
  bool is_shared_indexer_layer(int64_t l) const { return !is_full_indexer_layer(l); }
  bool layer_is(LayerKind k, int64_t l) const;
  bool indexer_neox() const { return arch == Arch::DeepSeek32; }  // indexer RoPE style
  int64_t latent_dim() const { return kv_lora_rank + n_rot; }     // 576: one latent cache row
  // Layer whose top-k a layer uses (itself if full; else the previous full layer).
  int64_t indexer_source_layer(int64_t l) const;

  // Reads and validates every key; a missing or out-of-range key raises InputError naming it.
  static ModelConfig from_gguf(const GgufFile& f);
  // Consistency checks (positive sizes, key_length == kv_lora + rope, ...); throws InputError.
  void validate(const std::string& where) const;
  // The embedded default model: the tiny glm-dsa dims used by `mlaconf synth` and the README.
  static ModelConfig tiny_default();
  // JSON object of every field (stable key names: fixtures store it, scripts read it).
  std::string to_json(int indent = 2) const;  // indent 0: one line
  nlohmann::ordered_json to_json_value() const;  // core/json.h
  // A short multi-line human summary.
  std::string summary() const;
};

// The dims a synthesized model varies, named as `mlaconf synth`'s options name them (unset = the base
// config's). Tests write them as one designated initializer: with_dims(base, {.layers = 3, ...}).
// Every member has a default member initializer, so that a designated initializer may leave any out (without
// one GCC's -Wextra warns of each member left out).
struct DimOverrides {
  std::optional<int64_t> layers{};  // layers the forward pass runs (block_count = layers + nextn)
  std::optional<int64_t> nextn{}, n_embd{}, n_head{}, q_lora{}, kv_lora{}, qk_nope{}, qk_rope{}, v_head{}, idx_heads{}, idx_dim{},
      top_k{}, experts{}, experts_used{}, shared{}, ff_exp{}, ff{}, vocab{}, dense_lead{}, groups{}, groups_used{}, ctx{};
  std::string indexer_types{};  // per layer, "FFSS" or "1,1,0,0" (F/1 full, S/0 shared; repeats); "" = all full
};
// `base` with `d` applied and the MLA lengths that follow from them (key_length_mla = qk_nope + qk_rope,
// key_length = kv_lora + qk_rope, value_length = kv_lora); groups without groups_used uses all groups.
// Throws InputError for a layer count outside 1..4096 or a bad indexer_types character.
ModelConfig with_dims(ModelConfig base, const DimOverrides& d);

const char* arch_string(Arch a);

}  // namespace mlaconf
