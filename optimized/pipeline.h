// mlaconf optimized: the whole GLM-5 (glm-dsa) forward pass on the GPU. Usable without nvcc.
//
//   Pipeline p(gguf, config);              // uploads the weights (raw ggml blocks) and sizes the caches
//   auto logits = p.forward(ids, trace);   // [T * vocab] for tokens at positions n_past()..n_past()+T-1
//   p.reset();                             // empties the latent and indexer caches
//
// Batched decode, as a server runs it (PipelineOptions::max_seqs > 0): B independent sequences, each in a
// slot with its own pages of one shared, paged latent cache per layer and its own indexer keys:
//   int a = p.open_sequence(), b = p.open_sequence();
//   p.prefill(a, ids_a); p.prefill(b, ids_b);                    // logits [T, vocab] of each prompt
//   auto lg = p.decode_step(std::vector<int>{a, b}, {tok_a, tok_b});  // [2, vocab]: one token of each
//   p.close_sequence(a);                                          // its pages go back to the pool
// Each row's arithmetic does not depend on B or on the other sequences (PipelineOptions::batch_invariant):
// row b of decode_step equals the logits of decoding that sequence alone, bit for bit. A decode step
// routes its MoE layers on the device (the host's selection and weights, bit for bit: optimized/route.cu)
// and so never waits for the host before its logits are read.
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
#include "core/memory_plan.h"
#include "core/model_config.h"
#include "core/trace.h"
#include "optimized/kernel_config.h"

namespace mlaconf::cuda {

bool cuda_available(std::string* why_not);

class OverflowError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The kernel and plan choices (KernelConfig: the GEMV kernels, prefill precision, graphs, batch invariance, ...)
// are the base, so that a pipeline reads them as options; the rest sizes the pipeline.
struct PipelineOptions : KernelConfig {
  int64_t max_ctx = 4096;         // cache rows per layer (capped at the model's context length)
  bool overflow_check = true;
  // Layer split: the CUDA devices of the stages, in order (empty = the current device alone). The layers
  // are split into contiguous ranges by core/memory_plan.h (balanced by bytes, the embedding on the first
  // stage, the output head on the last); each layer's weights and caches live on its stage's device and
  // the hidden state moves between stages with cudaMemcpyPeerAsync. An ordinal may repeat ("virtual
  // devices" of one GPU): the same code path, so the split is tested on one GPU. The arithmetic of each
  // layer is unchanged, so the logits are bit-identical to the unsplit run on the same GPU.
  std::vector<int> devices;
  // Batched decode (open_sequence / prefill / decode_step): sequence slots (0 = off: no pool is
  // allocated), rows per page of the shared latent cache, and pages in the pool (0 = enough for every
  // slot to reach max_ctx). A slot's indexer keys are its own region [max_ctx, Di] per full layer.
  int64_t max_seqs = 0;
  int64_t page_rows = 64;
  int64_t pool_pages = 0;
  // Bytes per device for the temporaries of a pass (forward(), prefill(), decode_step()): bump-allocated
  // from one buffer and poisoned (0xFF) by one memset per pass (optimized/arena.h); what does not fit
  // comes from the pool buffer by buffer (its own allocation and poison memset), as all did before. The
  // arena grows to 1.5x the largest pass that asked for more, up to this. 0: no arena.
  int64_t pass_arena_bytes = (int64_t)kPassArenaDefaultBytes;
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
  // The options in force (as given).
  const PipelineOptions& options() const;
  // The split, e.g. "devices 0,0: layers 0-1 | 2-3" ("" without a split).
  std::string split_summary() const;

  // Greedy generation (ties to the lower id): prefill `prompt`, then n_new decode steps. margins[i]
  // = top-1 minus top-2 logit of step i.
  std::vector<int32_t> generate(std::span<const int32_t> prompt, int64_t n_new, std::vector<double>* margins = nullptr,
                                Trace* trace = nullptr);

  // ---- Batched decode (needs PipelineOptions::max_seqs > 0; InputError otherwise) ----
  // A free slot, empty; InputError when all max_seqs slots are open.
  int open_sequence();
  // Frees the slot and its pages (InputError for a slot that is not open).
  void close_sequence(int seq);
  int64_t sequence_length(int seq) const;
  // Appends T tokens to the sequence (one pass, as forward() runs a prompt): logits [T, vocab].
  std::vector<float> prefill(int seq, std::span<const int32_t> ids);
  // One token for each of B distinct open sequences, in one pass: logits [B, vocab], row b for seqs[b].
  std::vector<float> decode_step(std::span<const int> seqs, std::span<const int32_t> ids);
  // The same step, returning each row's greedy pick (core/argmax.h's rule: the lowest id of the largest
  // non-NaN logit) computed on the device instead of the logits: what a server's greedy decode downloads.
  std::vector<int32_t> decode_step_greedy(std::span<const int> seqs, std::span<const int32_t> ids);
  // n greedy steps, each step's picks the next step's tokens: picks [steps][B], the same as n calls of
  // decode_step_greedy, each fed the previous call's picks. With decode_graph (one stage) the replays are
  // queued one step ahead, the picks fed to the next step on the device, so that the device does not idle
  // while the host downloads a step's picks, writes the next step's tables and launches its graph (the
  // steps up to the capture run one by one). Stops after a step that picks -1 for a row (its logits all
  // NaN: the next call of decode_step_greedy would reject that token): fewer than n rows then, and the
  // sequences advanced by exactly the steps returned.
  std::vector<std::vector<int32_t>> decode_steps_greedy(std::span<const int> seqs, std::span<const int32_t> ids, int64_t n);
  // For benchmarks: appends n positions whose latent and indexer-key rows are pattern values (no
  // model pass), so that decode at a long context can be timed without prefilling it.
  void append_synthetic_context(int seq, int64_t n, uint64_t seed);
  // Decode steps run as a replay of a captured CUDA graph so far (PipelineOptions::decode_graph).
  int64_t graph_replays() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlaconf::cuda
