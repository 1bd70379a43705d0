#include "core/weight_layout.h"

#include "core/error.h"
#include "core/gguf.h"

namespace mlaconf {

std::string wname::blk(int64_t layer, const char* suffix) { return "blk." + std::to_string(layer) + "." + suffix; }

namespace {
TensorSpec spec(std::string name, std::initializer_list<int64_t> ne, WeightRole role, int layer) {
  TensorSpec s;
  s.name = std::move(name);
  s.role = role;
  s.layer = layer;
  s.n_dims = static_cast<int>(ne.size());
  int d = 0;
  for (int64_t v : ne) s.ne[d++] = v;
  return s;
}
}  // namespace

std::vector<TensorSpec> layer_tensor_specs(const ModelConfig& c, int64_t l) {
  using namespace wname;
  using R = WeightRole;
  const int L = static_cast<int>(l);
  const int64_t E = c.n_embd, H = c.n_head;
  std::vector<TensorSpec> v;
  auto add = [&](const char* sfx, std::initializer_list<int64_t> ne, R r) { v.push_back(spec(blk(l, sfx), ne, r, L)); };
  add(kAttnNorm, {E}, R::Norm);
  add(kQA, {E, c.q_lora_rank}, R::Matrix);
  add(kQANorm, {c.q_lora_rank}, R::Norm);
  add(kQB, {c.q_lora_rank, H * c.qk_head()}, R::Matrix);
  add(kKvA, {E, c.kv_lora_rank + c.qk_rope()}, R::Matrix);
  add(kKvANorm, {c.kv_lora_rank}, R::Norm);
  add(kKB, {c.qk_nope(), c.kv_lora_rank, H}, R::PerHead);
  add(kVB, {c.kv_lora_rank, c.v_head(), H}, R::PerHead);
  add(kAttnOut, {H * c.v_head(), E}, R::Matrix);
  if (c.is_full_indexer_layer(l)) {
    add(kIdxQB, {c.q_lora_rank, c.indexer_n_head * c.indexer_head_size}, R::Matrix);
    add(kIdxK, {E, c.indexer_head_size}, R::Matrix);
    add(kIdxKNorm, {c.indexer_head_size}, R::Norm);
    add(kIdxKNormB, {c.indexer_head_size}, R::Norm);
    add(kIdxProj, {E, c.indexer_n_head}, R::Matrix);
  }
  add(kFfnNorm, {E}, R::Norm);
  if (!c.is_moe_layer(l)) {
    add(kFfnGate, {E, c.n_ff}, R::Matrix);
    add(kFfnUp, {E, c.n_ff}, R::Matrix);
    add(kFfnDown, {c.n_ff, E}, R::Matrix);
  } else {
    add(kGateInp, {E, c.n_expert}, R::Router);
    add(kExpProbsB, {c.n_expert}, R::Norm);
    add(kGateExps, {E, c.n_ff_exp, c.n_expert}, R::Experts);
    add(kUpExps, {E, c.n_ff_exp, c.n_expert}, R::Experts);
    add(kDownExps, {c.n_ff_exp, E, c.n_expert}, R::Experts);
    if (c.n_expert_shared > 0) {
      const int64_t S = c.n_ff_exp * c.n_expert_shared;
      add(kGateShexp, {E, S}, R::Matrix);
      add(kUpShexp, {E, S}, R::Matrix);
      add(kDownShexp, {S, E}, R::Matrix);
    }
  }
  return v;
}

std::vector<TensorSpec> model_tensor_specs(const ModelConfig& c) {
  std::vector<TensorSpec> v;
  v.push_back(spec(wname::kTokenEmbd, {c.n_embd, c.n_vocab}, WeightRole::Embedding, -1));
  for (int64_t l = 0; l < c.n_layer_run(); ++l) {
    auto lv = layer_tensor_specs(c, l);
    v.insert(v.end(), lv.begin(), lv.end());
  }
  v.push_back(spec(wname::kOutputNorm, {c.n_embd}, WeightRole::Norm, -1));
  v.push_back(spec(wname::kOutput, {c.n_embd, c.n_vocab}, WeightRole::Output, -1));
  return v;
}

void check_weight_type(const std::string& file, const TensorSpec& s, GgmlType type) {
  if ((s.role == WeightRole::Norm || s.role == WeightRole::Router) && type != GgmlType::F32)
    throw InputError(file + ": tensor '" + s.name + "' is " + type_name(type) + ", expected F32");
  if (!traits(type).weight_type)
    throw InputError(file + ": tensor '" + s.name + "' has type " + type_name(type) + ", which mlaconf cannot dequantize");
}

void validate_weights(const GgufFile& f, const ModelConfig& c) {
  for (const TensorSpec& s : model_tensor_specs(c)) {
    const TensorInfo* t = f.find_tensor(s.name);
    if (!t) throw InputError(f.path() + ": missing tensor '" + s.name + "'");
    bool same = t->n_dims == s.n_dims;
    for (int d = 0; d < 4 && same; ++d) same = t->ne[d] == s.ne[d];
    if (!same) {
      TensorInfo want;
      want.n_dims = s.n_dims;
      want.ne = s.ne;
      throw InputError(f.path() + ": tensor '" + s.name + "' has shape " + t->shape_string() + ", the config implies " +
                       want.shape_string());
    }
    check_weight_type(f.path(), s, t->type);
  }
}

}  // namespace mlaconf
