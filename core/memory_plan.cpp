// mlaconf: the memory plan of a layer split (see memory_plan.h).
#include "core/memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/gguf.h"
#include "core/json.h"
#include "core/weight_layout.h"

namespace mlaconf {
namespace {

constexpr int64_t kGemvMaxTokens = 8;  // PipelineOptions::gemv_max_tokens: larger passes dequantize

uint64_t tensor_bytes(const GgufFile& f, const std::string& name) {
  const TensorInfo* t = f.find_tensor(name);
  if (!t) throw InputError(f.path() + ": tensor " + name + " is missing (the memory plan needs every tensor's size)");
  return t->nbytes;
}

bool is_indexer_matrix(const std::string& name) { return name.find(".indexer.") != std::string::npos; }

// The prefill dequantization buffer a matrix needs (optimized/gemv.cu: linear_prefill_x3 holds W as fp32
// and as fp16 hi + lo, plus X as fp16 hi + lo; linear_prefill_f32, used for the indexer, holds W as fp32).
uint64_t dequant_need(const TensorSpec& s, int64_t U) {
  if (U <= kGemvMaxTokens) return 0;
  if (s.role != WeightRole::Matrix && s.role != WeightRole::Experts && s.role != WeightRole::Output) return 0;
  const uint64_t nw = static_cast<uint64_t>(s.ne[0]) * static_cast<uint64_t>(s.ne[1]);  // one expert's matrix
  if (is_indexer_matrix(s.name)) return nw * 4;
  return nw * 8 + static_cast<uint64_t>(U) * static_cast<uint64_t>(s.ne[0]) * 4;
}

// Every temporary of optimized/pipeline.cpp's Impl::layer (and Impl::moe) for one pass of U tokens
// against a context of C rows, summed: they live until the layer returns.
uint64_t layer_activations(const ModelConfig& c, int64_t l, int64_t U, int64_t C) {
  const int64_t E = c.n_embd, H = c.n_head, dq = c.qk_head(), dl = c.kv_lora_rank, dlat = c.latent_dim();
  int64_t f32 = E /*x*/ + 2 * c.q_lora_rank /*qa, cq*/ + H * dq /*qb*/ + 2 * dlat /*kva, lat*/ + H * dlat /*qabs*/ +
                H * dl /*att*/ + H * c.v_head() /*vout*/ + 3 * E /*ao, y, m*/;
  int64_t bytes_extra = H * dlat * 2;  // qabs as fp16
  const bool full = c.is_full_indexer_layer(l);
  if (full) {
    const int64_t Hi = c.indexer_n_head, Di = c.indexer_head_size;
    f32 += Hi * Di /*qi*/ + 2 * Di /*kraw, ki*/ + Hi /*wts*/ + C /*scores*/;
  }
  if (!c.is_moe_layer(l)) {
    f32 += 2 * c.n_ff;  // gate, up
  } else {
    const int64_t Fs = c.n_ff_exp * c.n_expert_shared;
    f32 += c.n_expert /*router logits*/ + c.n_expert_used * E /*eo*/ + 2 * E /*xe, de*/ + 2 * c.n_ff_exp /*ge, ue*/ +
           (Fs > 0 ? 2 * Fs + E : 0) /*shared g, u, out*/;
    bytes_extra += 2 * 4;  // token and slot lists (per token, upper bound)
  }
  return static_cast<uint64_t>(U) * static_cast<uint64_t>(f32 * 4 + bytes_extra);
}

struct Costs {
  const MemoryPlan& p;
  const ModelConfig& c;
  uint64_t head_dequant = 0;
  uint64_t per_device_fixed = 0;  // reserve + pass arena + hidden state (+ its copy from the previous device)
  uint64_t head_extra = 0;        // final norm output + logits

  // What device d (of n) needs with layers [b, e).
  DevicePlan device(int d, int n, int64_t b, int64_t e) const {
    DevicePlan dp;
    dp.index = d;
    dp.layer_begin = b;
    dp.layer_end = e;
    dp.embedding = d == 0;
    dp.head = d == n - 1;
    uint64_t act = 0, deq = 0, topk = 0;
    for (int64_t l = b; l < e; ++l) {
      const LayerCost& lc = p.layers[static_cast<size_t>(l)];
      dp.weights += lc.weights;
      dp.caches += lc.latent_cache + lc.indexer_cache;
      act = std::max(act, lc.activations);
      deq = std::max(deq, lc.dequant_scratch);
      topk += lc.topk;
    }
    if (dp.embedding) dp.weights += p.embedding_bytes;
    if (dp.head) {
      dp.weights += p.head_bytes;
      deq = std::max(deq, head_dequant);
    }
    dp.scratch = per_device_fixed + act + deq + topk + (dp.head ? head_extra : 0);
    return dp;
  }

  // Greedy split under `cap`: each device takes as many layers as fit; the last takes the rest.
  bool split(int n, uint64_t cap, std::vector<DevicePlan>* out) const {
    const int64_t L = static_cast<int64_t>(p.layers.size());
    std::vector<DevicePlan> v;
    int64_t b = 0;
    for (int d = 0; d < n; ++d) {
      int64_t e = b;
      if (d == n - 1) {
        e = L;
      } else {
        while (e < L && device(d, n, b, e + 1).total() <= cap) ++e;
      }
      DevicePlan dp = device(d, n, b, e);
      if (dp.total() > cap) return false;
      v.push_back(dp);
      b = e;
    }
    if (out) *out = std::move(v);
    return true;
  }
};

std::string range_string(const DevicePlan& d) {
  if (d.layer_end <= d.layer_begin) return "-";
  if (d.layer_end - d.layer_begin == 1) return std::to_string(d.layer_begin);
  return std::to_string(d.layer_begin) + "-" + std::to_string(d.layer_end - 1);
}

}  // namespace

std::string format_gib(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / double(uint64_t{1} << 30));
  return buf;
}

uint64_t MemoryPlan::total() const {
  uint64_t t = 0;
  for (const auto& d : devices) t += d.total();
  return t;
}

int MemoryPlan::device_of_layer(int64_t layer) const {
  for (const auto& d : devices)
    if (layer >= d.layer_begin && layer < d.layer_end) return d.index;
  return -1;
}

std::string MemoryPlan::table() const {
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-6s %-9s %-7s %12s %12s %12s %12s\n", "device", "layers", "extra", "weights", "caches",
                "scratch", "total");
  s += buf;
  for (const auto& d : devices) {
    const std::string extra = std::string(d.embedding ? "emb" : "") + (d.embedding && d.head ? "+" : "") + (d.head ? "head" : "");
    std::snprintf(buf, sizeof buf, "%-6d %-9s %-7s %12s %12s %12s %12s\n", d.index, range_string(d).c_str(),
                  extra.empty() ? "-" : extra.c_str(), format_gib(d.weights).c_str(), format_gib(d.caches).c_str(),
                  format_gib(d.scratch).c_str(), format_gib(d.total()).c_str());
    s += buf;
  }
  uint64_t w = 0, c = 0, sc = 0;
  for (const auto& d : devices) w += d.weights, c += d.caches, sc += d.scratch;
  std::snprintf(buf, sizeof buf, "%-6s %-9s %-7s %12s %12s %12s %12s\n", "all", "", "", format_gib(w).c_str(),
                format_gib(c).c_str(), format_gib(sc).c_str(), format_gib(total()).c_str());
  s += buf;
  return s;
}

std::string MemoryPlan::json() const {
  Json plan = Json::array();
  for (const DevicePlan& d : devices)
    plan.push_back({{"device", d.index},
                    {"layer_begin", d.layer_begin},
                    {"layer_end", d.layer_end},
                    {"embedding", d.embedding},
                    {"head", d.head},
                    {"weights_bytes", d.weights},
                    {"caches_bytes", d.caches},
                    {"scratch_bytes", d.scratch},
                    {"total_bytes", d.total()}});
  const Json j = {{"model", model},
                  {"devices", request.n_devices},
                  {"memory_per_device_bytes", request.memory_per_device},
                  {"context", request.context},
                  {"batch", request.batch},
                  {"ubatch", request.ubatch},
                  {"reserve_per_device_bytes", request.reserve_per_device},
                  {"pass_arena_per_device_bytes", request.pass_arena_per_device},
                  {"layers", layers.size()},
                  {"embedding_bytes", embedding_bytes},
                  {"head_bytes", head_bytes},
                  {"fits", fits},
                  {"total_bytes", total()},
                  {"plan", plan}};
  return json_text(j, -1);
}

std::string MemoryPlan::needs() const {
  std::string s;
  for (const auto& d : devices) {
    if (!s.empty()) s += ", ";
    s += "device " + std::to_string(d.index) + " " + format_gib(d.total()) + " (layers " + range_string(d) + ")";
  }
  return s;
}

MemoryPlan plan_memory(const GgufFile& f, const ModelConfig& c, const MemoryPlanRequest& r) {
  if (r.n_devices < 1 || r.n_devices > 1024) throw InputError("memory plan: the number of devices must be 1..1024");
  if (r.context < 1 || r.batch < 1 || r.ubatch < 1)
    throw InputError("memory plan: context, batch and ubatch must be positive");
  if (r.context > (int64_t{1} << 32) || r.batch > (int64_t{1} << 20) || r.ubatch > (int64_t{1} << 24))
    throw InputError("memory plan: context, batch or ubatch is absurdly large");
  MemoryPlan p;
  p.request = r;
  p.model = f.path();
  const int64_t L = c.n_layer_run(), U = r.ubatch, C = r.context, B = r.batch;
  for (int64_t l = 0; l < L; ++l) {
    LayerCost lc;
    lc.layer = l;
    for (const TensorSpec& s : layer_tensor_specs(c, l)) {
      lc.weights += tensor_bytes(f, s.name);
      lc.dequant_scratch = std::max(lc.dequant_scratch, dequant_need(s, U));
    }
    const bool full = c.is_full_indexer_layer(l);
    lc.latent_cache = static_cast<uint64_t>(C) * B * c.latent_dim() * 2;
    lc.indexer_cache = full ? static_cast<uint64_t>(C) * B * c.indexer_head_size * 4 : 0;
    lc.activations = layer_activations(c, l, U, C);
    lc.topk = full ? static_cast<uint64_t>(U) * c.indexer_top_k * 4 : 0;
    p.layers.push_back(lc);
  }
  p.embedding_bytes = tensor_bytes(f, wname::kTokenEmbd);
  p.head_bytes = tensor_bytes(f, wname::kOutputNorm) + tensor_bytes(f, wname::kOutput);

  Costs k{p, c};
  for (const TensorSpec& s : model_tensor_specs(c))
    if (s.role == WeightRole::Output) k.head_dequant = dequant_need(s, U);
  k.per_device_fixed = r.reserve_per_device + r.pass_arena_per_device + 2 * static_cast<uint64_t>(U) * c.n_embd * 4;
  k.head_extra = static_cast<uint64_t>(U) * (c.n_embd + c.n_vocab) * 4;

  // Binary search on the largest device total; everything on one device bounds it from above.
  const int n = r.n_devices;
  uint64_t hi = k.device(0, 1, 0, L).total() + k.per_device_fixed + p.embedding_bytes + p.head_bytes + k.head_dequant +
                k.head_extra;
  uint64_t lo = 0;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (k.split(n, mid, nullptr)) hi = mid;
    else lo = mid + 1;
  }
  if (!k.split(n, hi, &p.devices)) throw InputError("memory plan: internal error (no split at the upper bound)");
  p.fits = true;
  if (r.memory_per_device > 0)
    for (const auto& d : p.devices)
      if (d.total() > r.memory_per_device) p.fits = false;
  return p;
}

}  // namespace mlaconf
