#include "synth/synth.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "tokenizer/synthetic_vocab.h"

namespace mlaconf::synth {
namespace {

bool contains(const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; }

// Writes the model's hyperparameters with the key names and value types llama.cpp uses.
void put_metadata(GgufWriter& w, const Options& o) {
  const ModelConfig& c = o.config;
  const std::string p = c.arch_name + ".";
  auto u32 = [&](const char* k, int64_t v) { w.set_u32(p + k, static_cast<uint32_t>(v)); };
  w.set_string("general.architecture", c.arch_name);
  w.set_u32("general.alignment", static_cast<uint32_t>(o.alignment));
  w.set_string("general.type", "model");
  w.set_string("general.name", o.name);
  w.set_u32("general.quantization_version", 2);
  u32("vocab_size", c.n_vocab);
  u32("context_length", c.n_ctx_train);
  u32("embedding_length", c.n_embd);
  u32("feed_forward_length", c.n_ff);
  u32("block_count", c.n_layer);
  u32("leading_dense_block_count", c.n_layer_dense_lead);
  u32("attention.head_count", c.n_head);
  u32("attention.head_count_kv", c.n_head_kv);
  w.set_f32(p + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_eps));
  u32("attention.q_lora_rank", c.q_lora_rank);
  u32("attention.kv_lora_rank", c.kv_lora_rank);
  u32("attention.key_length", c.key_length);
  u32("attention.value_length", c.value_length);
  u32("attention.key_length_mla", c.key_length_mla);
  u32("attention.value_length_mla", c.value_length_mla);
  u32("attention.indexer.head_count", c.indexer_n_head);
  u32("attention.indexer.key_length", c.indexer_head_size);
  u32("attention.indexer.top_k", c.indexer_top_k);
  w.set_array_bool(p + "attention.indexer.types", c.indexer_full);
  u32("expert_feed_forward_length", c.n_ff_exp);
  u32("expert_count", c.n_expert);
  u32("expert_used_count", c.n_expert_used);
  u32("expert_shared_count", c.n_expert_shared);
  w.set_f32(p + "expert_weights_scale", static_cast<float>(c.expert_weights_scale));
  w.set_bool(p + "expert_weights_norm", c.expert_weights_norm);
  u32("expert_gating_func", static_cast<int>(c.gating));
  if (c.n_expert_groups != 1 || c.n_group_used != 1) {
    u32("expert_group_count", c.n_expert_groups);
    u32("expert_group_used_count", c.n_group_used);
  }
  u32("rope.dimension_count", c.n_rot);
  w.set_f32(p + "rope.freq_base", static_cast<float>(c.rope_freq_base));
  if (c.rope_scaling_factor > 0) {
    w.set_string(p + "rope.scaling.type", "yarn");
    w.set_f32(p + "rope.scaling.factor", static_cast<float>(c.rope_scaling_factor));
    u32("rope.scaling.original_context_length", c.rope_scaling_orig_ctx);
    w.set_f32(p + "rope.scaling.yarn_log_multiplier", static_cast<float>(c.rope_yarn_log_multiplier));
  }
  u32("nextn_predict_layers", c.n_nextn_layer);
  tok::add_synthetic_tokenizer(w, c.n_vocab);
}

void put_split_keys(GgufWriter& w, int no, int count, int64_t n_tensors) {
  GgufValue v;
  v.type = GgufType::UINT16;
  v.i = no;
  w.set_value("split.no", v);
  v.i = count;
  w.set_value("split.count", v);
  w.set_i32("split.tensors.count", static_cast<int32_t>(n_tensors));
}

// Streams one tensor's blocks in chunks of at most kChunk bytes.
void stream_tensor(AtomicFile& out, const PlannedTensor& t, const Options& o, std::vector<uint8_t>& buf) {
  constexpr uint64_t kChunk = 8u << 20;
  const TypeTraits& tr = traits(t.type);
  const uint64_t bs = static_cast<uint64_t>(tr.type_size);
  const uint64_t n_blocks = t.nbytes / bs;
  const uint64_t per_chunk = std::max<uint64_t>(1, kChunk / bs);
  const ValueDist dist = value_dist(t.spec, o.config);
  Rng rng = Rng::for_name(o.seed, t.spec.name);
  for (uint64_t b0 = 0; b0 < n_blocks; b0 += per_chunk) {
    const uint64_t nb = std::min(per_chunk, n_blocks - b0);
    buf.resize(nb * bs);
    fill_blocks(t.type, dist, rng, buf.data(), static_cast<int64_t>(nb));
    out.write(buf.data(), buf.size());
  }
}

}  // namespace

ModelConfig preset(const std::string& name) {
  if (name == "tiny") return ModelConfig::tiny_default();
  if (name == "glm5") {
    // GLM-5 keeps the tiny model's attention geometry (kv_lora 512, qk_nope 192, qk_rope 64, v_head 256,
    // indexer head 128, rms_eps, rope base, one shared expert, scale 2.5 normalized): the tiny model is
    // GLM-5 shrunk. 78 run layers + 1 MTP (nextn) layer.
    ModelConfig c = with_dims(ModelConfig::tiny_default(),
                              {.layers = 78, .nextn = 1, .n_embd = 6144, .n_head = 64, .q_lora = 2048, .idx_heads = 32,
                               .top_k = 2048, .experts = 256, .experts_used = 8, .ff_exp = 2048, .ff = 12288,
                               .vocab = 154880, .dense_lead = 3, .ctx = 202752});
    c.gating = GatingFunc::Sigmoid;
    return c;
  }
  throw InputError("synth: unknown preset '" + name + "' (tiny or glm5)");
}

GgmlType mix_type(const TensorSpec& s, const ModelConfig& c) {
  using T = GgmlType;
  const std::string& n = s.name;
  switch (s.role) {
    case WeightRole::Norm: case WeightRole::Router: return T::F32;
    case WeightRole::Embedding: return T::Q4_K;
    case WeightRole::Output: return T::Q6_K;
    default: break;
  }
  // Routed experts cycle through the tiny model's per-layer mix (layers 1 / 2 / 3 there).
  const int64_t moe_idx = s.layer - c.n_layer_dense_lead;
  if (contains(n, "_exps")) {
    if (contains(n, "ffn_down_exps")) {
      static const T down[3] = {T::Q6_K, T::Q5_K, T::Q4_K};
      return down[moe_idx % 3];
    }
    return moe_idx % 3 == 2 ? T::IQ4_XS : T::Q4_K;
  }
  if (contains(n, "_shexp")) return T::Q8_0;
  if (contains(n, "indexer.attn_k.")) return T::BF16;
  if (contains(n, "indexer.proj")) return T::F16;
  if (contains(n, "attn_q_a.")) return T::Q5_K;
  if (contains(n, "attn_kv_a_mqa")) return T::Q8_0;
  if (contains(n, "attn_k_b")) return T::Q5_0;
  if (contains(n, "ffn_down.")) return T::Q6_K;
  return T::Q4_K;
}

GgmlType fallback_type(GgmlType t, int64_t ne0) {
  if (ne0 % traits(t).block_size == 0) return t;
  GgmlType f;
  switch (t) {
    case GgmlType::Q4_K: f = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: f = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: f = GgmlType::Q8_0; break;
    default: f = traits(t).block_size > 32 ? GgmlType::IQ4_NL : GgmlType::F16; break;
  }
  return ne0 % traits(f).block_size == 0 ? f : GgmlType::F16;
}

ValueDist value_dist(const TensorSpec& s, const ModelConfig& c) {
  ValueDist d;
  const std::string& n = s.name;
  switch (s.role) {
    case WeightRole::Embedding: d.spread = 1.0; break;
    case WeightRole::Output: d.spread = 2.0 / std::sqrt(static_cast<double>(c.n_embd)); break;
    case WeightRole::Norm:
      d.kind = ValueDist::Uniform;
      if (contains(n, "k_norm.bias")) d.spread = 0.1;
      else if (contains(n, "exp_probs_b")) d.spread = 0.05;
      else { d.center = 1.0; d.spread = 0.2; }
      break;
    default: {
      // attn_k_b {nope, kv_lora, H} is W_UK^T: its linear (kv_b) reads the kv_lora latent.
      const int64_t fan_in = contains(n, "attn_k_b") ? s.ne[1] : s.ne[0];
      d.spread = 1.0 / std::sqrt(static_cast<double>(fan_in));
    }
  }
  return d;
}

std::vector<PlannedTensor> plan(const Options& o) {
  // At most 1000 shards: every shard's temporary name is held until all of them are written, so that
  // they appear together (core/atomic_file.h holds 1024 names).
  if (o.split < 1 || o.split > 1000) throw InputError("synth: --split must be between 1 and 1000");
  if (o.alignment == 0 || (o.alignment & (o.alignment - 1)) != 0 || o.alignment > (1u << 20))
    throw InputError("synth: alignment " + std::to_string(o.alignment) + " is not a power of two <= 2^20");
  o.config.validate("synth");
  if (o.config.indexer_full.size() != static_cast<size_t>(o.config.n_layer))
    throw InputError("synth: indexer types list has " + std::to_string(o.config.indexer_full.size()) +
                     " entries for " + std::to_string(o.config.n_layer) + " layers");
  std::vector<PlannedTensor> v;
  uint64_t total = 0;
  for (const TensorSpec& s : model_tensor_specs(o.config)) {
    PlannedTensor t;
    t.spec = s;
    GgmlType ty = mix_type(s, o.config);
    const bool f32_role = s.role == WeightRole::Norm || s.role == WeightRole::Router;
    if (o.has_type_default && !f32_role) ty = o.type_default;
    for (const auto& [pat, pt] : o.type_overrides)
      if (contains(s.name, pat.c_str())) ty = pt;
    if (!traits(ty).weight_type) throw InputError(std::string("synth: type ") + type_name(ty) + " is not a weight type");
    t.type = fallback_type(ty, s.ne[0]);
    check_weight_type("synth", s, t.type);  // the readers' rule: refuse now what they would refuse later
    t.nbytes = static_cast<uint64_t>(row_bytes(t.type, s.ne[0])) * static_cast<uint64_t>(s.ne[1] * s.ne[2] * s.ne[3]);
    total += t.nbytes;
    v.push_back(std::move(t));
  }
  // Shards by bytes: a tensor goes to the shard its starting byte falls in.
  uint64_t before = 0;
  for (auto& t : v) {
    t.shard = total ? static_cast<int>(std::min<uint64_t>(o.split - 1, static_cast<uint64_t>(
                                           static_cast<long double>(before) * o.split / total)))
                    : 0;
    before += t.nbytes;
  }
  return v;
}

std::vector<std::string> output_paths(const Options& o, const std::string& out) {
  if (o.split <= 1) return {out};
  std::string prefix = out;
  if (prefix.size() > 5 && prefix.compare(prefix.size() - 5, 5, ".gguf") == 0) prefix.resize(prefix.size() - 5);
  std::vector<std::string> v;
  for (int k = 1; k <= o.split; ++k) v.push_back(make_split_name(prefix, k, o.split));
  return v;
}

std::vector<std::string> write_model(const Options& o, const std::string& out) {
  const std::vector<PlannedTensor> tensors = plan(o);
  const std::vector<std::string> names = output_paths(o, out);
  std::vector<std::string> paths;
  std::vector<uint8_t> buf;
  std::vector<std::unique_ptr<AtomicFile>> files;  // written, flushed, not yet renamed
  for (int k = 0; k < o.split; ++k) {
    const std::string& path = names[static_cast<size_t>(k)];
    GgufWriter w(o.alignment);
    if (o.split > 1) put_split_keys(w, k, o.split, static_cast<int64_t>(tensors.size()));
    if (k == 0) put_metadata(w, o);
    else if (o.alignment != 32) w.set_u32("general.alignment", static_cast<uint32_t>(o.alignment));
    std::vector<const PlannedTensor*> mine;
    for (const auto& t : tensors)
      if (t.shard == k) {
        std::vector<int64_t> ne(t.spec.ne.begin(), t.spec.ne.begin() + t.spec.n_dims);
        w.add_tensor_info(t.spec.name, t.type, ne);
        mine.push_back(&t);
      }
    const std::vector<uint8_t> header = w.header_bytes();
    const uint64_t a = o.alignment;
    auto pad = [a](uint64_t x) { return (x + a - 1) / a * a; };
    uint64_t size = header.size();
    for (const PlannedTensor* t : mine) size = pad(size + t->nbytes);
    files.push_back(std::make_unique<AtomicFile>(path));
    AtomicFile& f = *files.back();
    f.write(header.data(), header.size());
    if (o.header_only) {
      f.extend_to(size);
    } else {
      static const uint8_t zeros[4096] = {};
      for (const PlannedTensor* t : mine) {
        stream_tensor(f, *t, o, buf);
        for (uint64_t n = pad(f.pos()) - f.pos(); n > 0;) {
          const uint64_t k = std::min<uint64_t>(n, sizeof zeros);
          f.write(zeros, k);
          n -= k;
        }
      }
    }
    f.finish();  // flushed and closed; renamed below, with the others
    paths.push_back(path);
  }
  // The shards appear together or not at all: a failure above (a full disk at shard k) removes every
  // temporary file; a failed rename here removes the shards this call already renamed.
  size_t renamed = 0;
  try {
    for (; renamed < files.size(); ++renamed) files[renamed]->rename_into_place();
  } catch (...) {
    for (size_t i = 0; i < renamed; ++i) std::remove(paths[i].c_str());
    throw;
  }
  return paths;
}

}  // namespace mlaconf::synth
