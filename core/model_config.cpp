#include "core/model_config.h"

#include "core/json.h"

#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/gguf.h"

namespace mlaconf {

const char* arch_string(Arch a) { return a == Arch::DeepSeek32 ? "deepseek32" : "glm-dsa"; }

int64_t ModelConfig::indexer_source_layer(int64_t l) const {
  for (int64_t k = l; k >= 0; --k)
    if (is_full_indexer_layer(k)) return k;
  return 0;
}

bool ModelConfig::layer_is(LayerKind k, int64_t l) const {
  switch (k) {
    case LayerKind::Any: return true;
    case LayerKind::Moe: return is_moe_layer(l);
    case LayerKind::Dense: return is_dense_layer(l);
    case LayerKind::FullIndexer: return is_full_indexer_layer(l);
    case LayerKind::SharedIndexer: return is_shared_indexer_layer(l);
    case LayerKind::GroupedMoe: return is_moe_layer(l) && n_expert_groups > 1;
  }
  return false;
}

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  c.arch_name = f.get_string("general.architecture");
  if (c.arch_name == "glm-dsa") c.arch = Arch::GlmDsa;
  else if (c.arch_name == "deepseek32") c.arch = Arch::DeepSeek32;
  else
    throw InputError(f.path() + ": architecture '" + c.arch_name + "' is not supported (expected glm-dsa or deepseek32)");
  const std::string p = c.arch_name + ".";
  auto I = [&](const char* k) { return f.get_int(p + k); };
  auto F = [&](const char* k) { return f.get_float(p + k); };
  auto has = [&](const char* k) { return f.find(p + k) != nullptr; };

  c.n_layer = I("block_count");
  c.n_nextn_layer = has("nextn_predict_layers") ? I("nextn_predict_layers") : 0;
  c.n_ctx_train = I("context_length");
  c.n_embd = I("embedding_length");
  c.n_ff = I("feed_forward_length");
  c.n_head = I("attention.head_count");
  c.n_head_kv = I("attention.head_count_kv");
  c.q_lora_rank = I("attention.q_lora_rank");
  c.kv_lora_rank = I("attention.kv_lora_rank");
  c.key_length = I("attention.key_length");
  c.value_length = I("attention.value_length");
  c.key_length_mla = I("attention.key_length_mla");
  c.value_length_mla = I("attention.value_length_mla");
  c.rms_eps = F("attention.layer_norm_rms_epsilon");
  c.n_rot = I("rope.dimension_count");
  c.rope_freq_base = F("rope.freq_base");
  if (has("rope.scaling.factor")) c.rope_scaling_factor = F("rope.scaling.factor");
  if (has("rope.scaling.original_context_length")) c.rope_scaling_orig_ctx = I("rope.scaling.original_context_length");
  if (has("rope.scaling.yarn_log_multiplier")) c.rope_yarn_log_multiplier = F("rope.scaling.yarn_log_multiplier");
  c.indexer_n_head = I("attention.indexer.head_count");
  c.indexer_head_size = I("attention.indexer.key_length");
  c.indexer_top_k = I("attention.indexer.top_k");
  c.n_layer_dense_lead = I("leading_dense_block_count");
  c.n_expert = I("expert_count");
  c.n_expert_used = I("expert_used_count");
  c.n_expert_shared = I("expert_shared_count");
  c.n_ff_exp = I("expert_feed_forward_length");
  c.expert_weights_scale = F("expert_weights_scale");
  c.expert_weights_norm = f.get_bool(p + "expert_weights_norm");
  // llama.cpp defaults the gating function to sigmoid when the key is absent.
  int64_t g = has("expert_gating_func") ? I("expert_gating_func") : 2;
  if (g != 1 && g != 2)
    throw InputError(f.path() + ": " + p + "expert_gating_func = " + std::to_string(g) + " (1 softmax or 2 sigmoid)");
  c.gating = static_cast<GatingFunc>(g);
  c.n_expert_groups = has("expert_group_count") ? I("expert_group_count") : 1;
  c.n_group_used = has("expert_group_used_count") ? I("expert_group_used_count") : c.n_expert_groups;

  // Vocabulary: the explicit key, else the tokenizer's token list, else the output head.
  if (has("vocab_size")) c.n_vocab = I("vocab_size");
  else if (const GgufValue* t = f.find("tokenizer.ggml.tokens"); t && t->is_array()) c.n_vocab = static_cast<int64_t>(t->array_size());
  else if (const TensorInfo* o = f.find_tensor("output.weight")) c.n_vocab = o->ne[1];
  else throw InputError(f.path() + ": cannot tell the vocabulary size (no " + p + "vocab_size, tokenizer.ggml.tokens or output.weight)");

  // Per-layer indexer types: explicit array, else every layer "full" (GLM-5 / 5.1, DeepSeek-V3.2).
  c.indexer_full.assign(static_cast<size_t>(std::max<int64_t>(c.n_layer, 0)), true);
  if (const GgufValue* t = f.find(p + "attention.indexer.types")) {
    if (!t->is_array() || !t->strings.empty() || !t->floats.empty())
      throw InputError(f.path() + ": " + p + "attention.indexer.types must be an array of bool or integers");
    if (static_cast<int64_t>(t->ints.size()) != c.n_layer)
      throw InputError(f.path() + ": " + p + "attention.indexer.types has " + std::to_string(t->ints.size()) +
                       " entries for " + std::to_string(c.n_layer) + " layers");
    for (size_t k = 0; k < t->ints.size(); ++k) c.indexer_full[k] = t->ints[k] != 0;
  }
  c.validate(f.path());
  return c;
}

void ModelConfig::validate(const std::string& where) const {
  auto bad = [&](const std::string& what) { throw InputError(where + ": invalid model config: " + what); };
  auto pos = [&](int64_t v, const char* name, int64_t max = (int64_t{1} << 31)) {
    if (v <= 0 || v > max) bad(std::string(name) + " = " + std::to_string(v) + " is out of range");
  };
  pos(n_layer, "block_count", 4096);
  if (n_nextn_layer < 0 || n_nextn_layer >= n_layer) bad("nextn_predict_layers = " + std::to_string(n_nextn_layer));
  pos(n_embd, "embedding_length");
  pos(n_ff, "feed_forward_length");
  pos(n_vocab, "vocab size");
  pos(n_head, "attention.head_count", 65536);
  pos(q_lora_rank, "attention.q_lora_rank");
  pos(kv_lora_rank, "attention.kv_lora_rank");
  pos(key_length_mla, "attention.key_length_mla");
  pos(value_length_mla, "attention.value_length_mla");
  pos(n_rot, "rope.dimension_count");
  if (n_rot % 2 != 0 || n_rot >= key_length_mla) bad("rope.dimension_count must be even and below key_length_mla");
  if (key_length != kv_lora_rank + n_rot)
    bad("attention.key_length = " + std::to_string(key_length) + " but kv_lora_rank + rope = " +
        std::to_string(kv_lora_rank + n_rot));
  if (value_length != kv_lora_rank)
    bad("attention.value_length = " + std::to_string(value_length) + " but kv_lora_rank = " + std::to_string(kv_lora_rank));
  if (!(rms_eps > 0 && rms_eps < 1)) bad("attention.layer_norm_rms_epsilon out of range");
  if (!(rope_freq_base > 0)) bad("rope.freq_base must be positive");
  pos(indexer_n_head, "attention.indexer.head_count", 65536);
  pos(indexer_head_size, "attention.indexer.key_length");
  if (indexer_head_size < n_rot) bad("attention.indexer.key_length is smaller than the rope dimension");
  // Sizes every [T, top_k] selection: a sparse attention's k is small (2048 on GLM-5); 2^31 - 1 ran out of memory.
  pos(indexer_top_k, "attention.indexer.top_k", 1 << 16);
  if (n_layer_dense_lead < 0 || n_layer_dense_lead > n_layer) bad("leading_dense_block_count out of range");
  if (n_layer_dense_lead < n_layer_run()) {
    pos(n_expert, "expert_count", 1 << 20);
    pos(n_expert_used, "expert_used_count", n_expert);
    pos(n_ff_exp, "expert_feed_forward_length");
    if (n_expert_shared < 0) bad("expert_shared_count is negative");
    pos(n_expert_groups, "expert_group_count", n_expert);
    if (n_expert % n_expert_groups != 0) bad("expert_count is not a multiple of expert_group_count");
    pos(n_group_used, "expert_group_used_count", n_expert_groups);
    if (n_group_used * (n_expert / n_expert_groups) < n_expert_used)
      bad("expert_group_used_count groups hold fewer experts than expert_used_count");
  }
  if (!indexer_full.empty() && !indexer_full[0]) bad("layer 0 must be a full indexer layer");
}

ModelConfig ModelConfig::tiny_default() {
  ModelConfig c;
  c.n_layer = 4;
  c.n_ctx_train = 4096;
  c.n_embd = 512;
  c.n_ff = 1024;
  c.n_vocab = 2048;
  c.n_head = 4;
  c.n_head_kv = 1;
  c.q_lora_rank = 256;
  c.kv_lora_rank = 512;
  c.key_length = 576;
  c.value_length = 512;
  c.key_length_mla = 256;
  c.value_length_mla = 256;
  c.n_rot = 64;
  c.rope_freq_base = 1e6;
  c.rms_eps = 1e-5;
  c.indexer_n_head = 8;
  c.indexer_head_size = 128;
  c.indexer_top_k = 64;
  c.indexer_full.assign(4, true);
  c.n_layer_dense_lead = 1;
  c.n_expert = 16;
  c.n_expert_used = 4;
  c.n_expert_shared = 1;
  c.n_ff_exp = 256;
  c.expert_weights_scale = 2.5;
  c.expert_weights_norm = true;
  return c;
}

ModelConfig with_dims(ModelConfig c, const DimOverrides& d) {
  const int64_t run_layers = d.layers.value_or(c.n_layer_run());
  if (d.nextn) c.n_nextn_layer = *d.nextn;
  c.n_layer = run_layers + c.n_nextn_layer;
  const int64_t nope = d.qk_nope.value_or(c.qk_nope());
  // Each override and the field it sets.
  using D = DimOverrides;
  using M = ModelConfig;
  static constexpr std::pair<std::optional<int64_t> D::*, int64_t M::*> kSet[] = {
      {&D::n_embd, &M::n_embd},           {&D::n_head, &M::n_head},           {&D::q_lora, &M::q_lora_rank},
      {&D::kv_lora, &M::kv_lora_rank},    {&D::qk_rope, &M::n_rot},           {&D::v_head, &M::value_length_mla},
      {&D::idx_heads, &M::indexer_n_head}, {&D::idx_dim, &M::indexer_head_size}, {&D::top_k, &M::indexer_top_k},
      {&D::experts, &M::n_expert},        {&D::experts_used, &M::n_expert_used}, {&D::shared, &M::n_expert_shared},
      {&D::ff_exp, &M::n_ff_exp},         {&D::ff, &M::n_ff},                 {&D::vocab, &M::n_vocab},
      {&D::dense_lead, &M::n_layer_dense_lead}, {&D::groups, &M::n_expert_groups}, {&D::ctx, &M::n_ctx_train}};
  for (const auto& [from, to] : kSet)
    if (d.*from) c.*to = *(d.*from);
  c.key_length_mla = nope + c.n_rot;
  c.key_length = c.kv_lora_rank + c.n_rot;
  c.value_length = c.kv_lora_rank;
  c.n_group_used = d.groups_used.value_or(d.groups ? *d.groups : c.n_group_used);
  if (c.n_layer < 1 || c.n_layer > 4096) throw InputError("synth: --layers out of range");
  c.indexer_full.assign(static_cast<size_t>(c.n_layer), true);
  if (!d.indexer_types.empty()) {
    std::vector<bool> pat;
    for (char ch : d.indexer_types) {
      if (ch == 'F' || ch == 'f' || ch == '1') pat.push_back(true);
      else if (ch == 'S' || ch == 's' || ch == '0') pat.push_back(false);
      else if (ch != ',' && ch != ' ') throw InputError(std::string("synth: --indexer-types: bad character '") + ch + "'");
    }
    if (pat.empty()) throw InputError("synth: --indexer-types is empty");
    for (size_t l = 0; l < c.indexer_full.size(); ++l) c.indexer_full[l] = pat[l % pat.size()];
  }
  return c;
}

Json ModelConfig::to_json_value() const {
  Json indexer = Json::array();
  for (bool b : indexer_full) indexer.push_back(b);
  return Json{{"arch", arch_name},
              {"n_layer", n_layer},
              {"n_nextn_layer", n_nextn_layer},
              {"n_ctx_train", n_ctx_train},
              {"n_embd", n_embd},
              {"n_ff", n_ff},
              {"n_vocab", n_vocab},
              {"n_head", n_head},
              {"n_head_kv", n_head_kv},
              {"q_lora_rank", q_lora_rank},
              {"kv_lora_rank", kv_lora_rank},
              {"key_length", key_length},
              {"value_length", value_length},
              {"key_length_mla", key_length_mla},
              {"value_length_mla", value_length_mla},
              {"qk_nope", qk_nope()},
              {"qk_rope", qk_rope()},
              {"rope_freq_base", rope_freq_base},
              {"rope_scaling_factor", rope_scaling_factor},
              {"rope_scaling_orig_ctx", rope_scaling_orig_ctx},
              {"rope_yarn_log_multiplier", rope_yarn_log_multiplier},
              {"rms_eps", rms_eps},
              {"indexer_n_head", indexer_n_head},
              {"indexer_head_size", indexer_head_size},
              {"indexer_top_k", indexer_top_k},
              {"indexer_full", std::move(indexer)},
              {"n_layer_dense_lead", n_layer_dense_lead},
              {"n_expert", n_expert},
              {"n_expert_used", n_expert_used},
              {"n_expert_shared", n_expert_shared},
              {"n_ff_exp", n_ff_exp},
              {"expert_weights_scale", expert_weights_scale},
              {"expert_weights_norm", expert_weights_norm},
              {"expert_gating_func", static_cast<int>(gating)},
              {"n_expert_groups", n_expert_groups},
              {"n_group_used", n_group_used}};
}

std::string ModelConfig::to_json(int indent) const { return json_text(to_json_value(), indent > 0 ? indent : -1); }

std::string ModelConfig::summary() const {
  std::ostringstream os;
  os << "  arch            " << arch_name << "\n"
     << "  layers          " << n_layer_run() << " run (" << n_layer << " blocks, " << n_nextn_layer << " MTP), "
     << n_layer_dense_lead << " dense-MLP leading\n"
     << "  hidden          " << n_embd << ", dense ff " << n_ff << ", vocab " << n_vocab << ", ctx " << n_ctx_train << "\n"
     << "  MLA             " << n_head << " heads, q_lora " << q_lora_rank << ", kv_lora " << kv_lora_rank
     << ", qk nope/rope " << qk_nope() << "/" << qk_rope() << ", v " << v_head() << ", latent row " << latent_dim() << "\n"
     << "  RoPE            theta " << rope_freq_base << (rope_scaling_factor > 0 ? ", YaRN factor " + std::to_string(rope_scaling_factor) : ", no scaling")
     << "; rms eps " << rms_eps << "\n"
     << "  indexer         " << indexer_n_head << " x " << indexer_head_size << ", top_k " << indexer_top_k
     << (indexer_neox() ? ", NeoX RoPE" : ", interleaved RoPE") << "\n"
     << "  MoE             " << n_expert << " experts, top-" << n_expert_used << ", " << n_expert_shared
     << " shared, ff " << n_ff_exp << ", groups " << n_group_used << "/" << n_expert_groups << ", scale "
     << expert_weights_scale << (expert_weights_norm ? " (normalized)" : "") << ", gating "
     << (gating == GatingFunc::Sigmoid ? "sigmoid" : "softmax") << "\n";
  return os.str();
}

}  // namespace mlaconf
