// mlaconf optimized: the whole GLM-5 (glm-dsa) forward pass on the GPU. Usable without nvcc.
//
//   Pipeline p(gguf, config);              // uploads the weights (raw ggml blocks) and sizes the caches
//   auto logits = p.forward(ids, trace);   // [T * vocab] for tokens at positions n_past()..n_past()+T-1
//   p.reset();                             // empties the latent and indexer caches
//
// Storage: weights as ggml blocks, the latent cache [ctx, kv_lora+rope] in fp16 per layer, attention
// queries in fp16, the residual stream in fp32; every product accumulates in fp32. The indexer (q, key
// cache [ctx, Di], scores) stays in fp32: its top-k is decided by near-ties that fp16 rounding flips.
// Decode (T <= 8) uses the fused dequant GEMVs (fp32 weights values, fp32 accumulation); prefill
// dequantizes each weight and runs cuBLAS fp16 GEMMs with weights and activations split into fp16
// hi + lo parts (PipelineOptions::prefill). Intermediates go to a Trace under core/trace.h's names, so a capture with this
// backend is judged by `mlaconf compare` against the reference.
//
// With the overflow check on (the default), each op's output is scanned and the first one holding
// inf/NaN raises OverflowError naming the layer and the op.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/decisions.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/trace.h"

namespace mlaconf::cuda {

bool cuda_available(std::string* why_not);

class OverflowError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PipelineOptions {
  int64_t max_ctx = 4096;         // cache rows per layer (capped at the model's context length)
  bool overflow_check = true;
  int64_t gemv_max_tokens = 8;    // passes of at most this many tokens use the fused GEMVs
  // Prefill GEMM precision. Fp16: weights rounded to fp16 (activations hi+lo): measured on the tiny
  // model, the rounding flips indexer near-ties that cascade (greedy diverged at step 1 against a
  // reference margin of 0.56). Fp16x3 (default): weights and activations as fp16 hi + lo, three
  // tensor-core GEMMs: 24/24 greedy tokens equal. Fp32: SGEMM on fp32 weights (no TF32), same result,
  // slower. Environment MLACONF_CUDA_PREFILL=fp16|fp16x3|fp32 overrides.
  enum class Prefill { Fp16, Fp16x3, Fp32 };
  Prefill prefill = Prefill::Fp16x3;
  // Layer split: the CUDA devices of the stages, in order (empty = the current device alone). The layers
  // are split into contiguous ranges by core/memory_plan.h (balanced by bytes, the embedding on the first
  // stage, the output head on the last); each layer's weights and caches live on its stage's device and
  // the hidden state moves between stages with cudaMemcpyPeerAsync. An ordinal may repeat ("virtual
  // devices" of one GPU): the same code path, so the split is tested on one GPU. The arithmetic of each
  // layer is unchanged, so the logits are bit-identical to the unsplit run on the same GPU.
  std::vector<int> devices;
};

// A host tensor of op replay: row-major values, shape.
struct OpTensor {
  std::vector<int64_t> shape;
  std::vector<double> v;
};

class Pipeline {
 public:
  // Validates the weights against the config (InputError), uploads them, allocates the caches.
  // Throws NotSupported (core/error.h, exit 3) for what the pipeline does not do (YaRN RoPE scaling).
  Pipeline(const GgufFile& f, const ModelConfig& c, PipelineOptions opt = {});
  ~Pipeline();
  Pipeline(Pipeline&&) noexcept;

  // Logits [T, vocab], row-major. `forced` (may be null): indexer selections and expert ids used instead
  // of the pipeline's own (core/decisions.h); its own are still computed and recorded.
  std::vector<float> forward(std::span<const int32_t> ids, Trace* trace = nullptr, const ForcedDecisions* forced = nullptr);
  void reset();
  int64_t n_past() const;

  // Op replay: runs one op of `layer` (an output dataset name of tools/backend/op_table.h) on exact
  // inputs, with this pipeline's kernels and precision, and returns its outputs by dataset name.
  // `pos0` is the position of the first input row. Throws InputError for an unknown op or bad shapes.
  std::map<std::string, OpTensor> replay_op(int layer, const std::string& op, const std::map<std::string, OpTensor>& in,
                                            int64_t pos0);
  const ModelConfig& config() const;
  // The split, e.g. "devices 0,0: layers 0-1 | 2-3" ("" without a split).
  std::string split_summary() const;

  // Greedy generation (ties to the lower id): prefill `prompt`, then n_new decode steps. margins[i]
  // = top-1 minus top-2 logit of step i.
  std::vector<int32_t> generate(std::span<const int32_t> prompt, int64_t n_new, std::vector<double>* margins = nullptr,
                                Trace* trace = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlaconf::cuda
