// mlaconf: the memory plan of a layer split: which device runs which layers, and what each device holds.
//
// From the GGUF header only (tensor types and shapes; no tensor data is read). Per device:
//   weights   the quantized tensors of its layers, as stored (the CUDA pipeline uploads raw ggml blocks),
//             plus token_embd on the first device and output_norm + output on the last;
//   caches    per layer and per sequence: the latent cache (fp16, kv_lora + rope values per token) and
//             the indexer key cache (fp32, indexer_head_size values per token: the CUDA pipeline keeps it
//             fp32 because fp16 rounding flips the top-k's near-ties), at `context` tokens x `batch`;
//   scratch   what optimized/pipeline.cpp allocates for one pass of `ubatch` tokens: the activations of
//             one layer (all of its temporaries at once, the indexer scores [ubatch, context] included),
//             the hidden state, the per-layer top-k lists, the prefill dequantization buffer (the largest
//             matrix of the device: fp32 + fp16 hi + lo = 8 bytes per value, fp32 only for the indexer's),
//             the logits on the last device, a fixed reserve for the CUDA context and cuBLAS, and the
//             pipeline's per-pass arena (PipelineOptions::pass_arena_bytes: once a pass outgrew it, the
//             arena stays at its cap while that pass's temporaries come from the pool as listed above).
// The layers are split into contiguous ranges, the embedding on the first device and the head on the
// last, so as to minimise the largest device total (binary search on that total; for a given cap, each
// device taking as many layers as fit is optimal for contiguous ranges). The same function serves
// `mlaconf plan` and the CUDA pipeline's layer split (PipelineOptions::devices).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_config.h"

namespace mlaconf {

class GgufFile;

// The CUDA pipeline's per-pass arena cap per device (PipelineOptions::pass_arena_bytes' default), which
// the plan counts as held on every device: one value for the pipeline, the plan and `mlaconf plan`.
inline constexpr uint64_t kPassArenaDefaultBytes = uint64_t{1} << 30;

struct MemoryPlanRequest {
  int n_devices = 1;
  uint64_t memory_per_device = 0;  // bytes; 0 = no limit (only balance)
  int64_t context = 4096;          // cache rows per sequence
  int64_t batch = 1;               // sequences (caches scale with it)
  int64_t ubatch = 512;            // tokens per forward pass (sizes the activations)
  uint64_t reserve_per_device = uint64_t{1} << 30;  // CUDA context, cuBLAS workspace, small scratch
  // The CUDA pipeline's per-pass arena, held per device (the default of PipelineOptions::pass_arena_bytes).
  uint64_t pass_arena_per_device = kPassArenaDefaultBytes;
};

struct LayerCost {
  int64_t layer = 0;
  uint64_t weights = 0;          // quantized, as stored
  uint64_t latent_cache = 0;     // context * batch * (kv_lora + rope) * 2
  uint64_t indexer_cache = 0;    // context * batch * Di * 4 (full indexer layers)
  uint64_t activations = 0;      // the layer's temporaries for one pass of ubatch tokens
  uint64_t topk = 0;             // its top-k list, kept for the whole pass
  uint64_t dequant_scratch = 0;  // prefill dequantization buffer for its largest matrix
};

struct DevicePlan {
  int index = 0;
  int64_t layer_begin = 0, layer_end = 0;  // [begin, end)
  bool embedding = false, head = false;
  uint64_t weights = 0;   // layers' + embedding / head
  uint64_t caches = 0;    // latent + indexer key caches
  uint64_t scratch = 0;   // activations, dequant buffer, hidden, logits, reserve
  uint64_t total() const { return weights + caches + scratch; }
};

struct MemoryPlan {
  MemoryPlanRequest request;
  std::string model;
  std::vector<LayerCost> layers;
  uint64_t embedding_bytes = 0, head_bytes = 0;
  std::vector<DevicePlan> devices;
  bool fits = true;  // every device total <= memory_per_device (always true without a limit)

  uint64_t total() const;
  int device_of_layer(int64_t layer) const;
  // A fixed-width table (one row per device, then the totals).
  std::string table() const;
  // One JSON object on one line (core/json.h: a path that is not UTF-8 stays valid JSON): request,
  // per-device ranges and bytes, fits.
  std::string json() const;
  // "device 0: 103.2 GiB (layers 0-20, weights ..., caches ..., scratch ...), device 1: ..."
  std::string needs() const;
};

// Throws InputError for a request that cannot be planned (no devices, bad sizes, a tensor missing).
MemoryPlan plan_memory(const GgufFile& f, const ModelConfig& c, const MemoryPlanRequest& r);

std::string format_gib(uint64_t bytes);  // "95.99 GiB"

}  // namespace mlaconf
