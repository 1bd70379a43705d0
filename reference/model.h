// mlaconf reference: the whole GLM-5 (glm-dsa / deepseek32) forward pass, Eigen on the CPU.
//
//   h = token_embd[ids]
//   for each layer l:  a = h + attn_output(MLA+DSA(RMSNorm_attn(h)));  h = a + FFN(RMSNorm_ffn(a))
//   logits = output(RMSNorm_output(h))
// FFN is the dense SwiGLU MLP on the leading layers, the MoE (+ shared expert) after. Every layer keeps
// a latent cache [n_past, kv_lora+rope] and (full indexer layers) an indexer key cache [n_past, Di], so
// a forward of T new tokens runs at positions n_past()..n_past()+T-1: prefill and incremental decode
// are the same call. Intermediates go to a Trace (core/trace.h names), row-major, as double.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/decisions.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/trace.h"
#include "reference/mla.h"
#include "reference/ops.h"

namespace mlaconf::ref {

struct ModelOptions {
  size_t expert_cache_bytes = size_t(4) << 30;  // LRU budget for dequantized routed experts
  // With experts_in_flight other than 1, routed experts run side by side, one per thread (reference/moe.h
  // MoeRun), at most as many as this budget holds dequantized (at least one; f64 GLM-5 experts are 302 MB
  // each: 13 at 16 threads). Does not change any value.
  size_t experts_in_flight_bytes = size_t(4) << 30;
  // > 0: at most this many experts in flight whatever the budget; 1 (the default): the experts one after
  // another, each one's products split over the threads, which measured as fast at 2 and 16 threads with
  // half the memory (docs/REAL_SIZE.md). 0: as many as experts_in_flight_bytes holds.
  int64_t experts_in_flight = 1;
  MlaForm mla_form = MlaForm::Absorbed;
  // Negative control: attend to every causal token, ignoring the indexer's selection.
  bool dense_attention = false;
  // Drops each layer's dequantized weights as soon as they have been used: the attention block's after
  // attention, the FFN's (and its cached experts) after the FFN (Weights::release_layer).
  // For a single pass over a model too big to keep dequantized (a capture of one deep GLM-5 layer:
  // layer 0's dense MLP alone is 0.9 GB as float); a later pass dequantizes them again. Results are
  // identical either way.
  bool release_layer_weights = false;
};

struct GenerateResult {
  std::vector<int32_t> tokens;   // the generated tokens only
  std::vector<double> margins;   // per step: top-1 minus top-2 logit
};

// Greedy argmax of a logits row, ties to the lower id; `margin` = top-1 minus top-2.
template <class S>
class Weights;

template <class S>
int32_t argmax_lower(const Eigen::Ref<const Vec<S>>& row, double* margin);

// The RoPE frequencies [n_rot/2] (YaRN-corrected where the config asks) and the attention softmax
// scale 1/sqrt(qk_nope + qk_rope) (times the DeepSeek YaRN mscale²) of a model: what Model uses, and
// what a replay of one of its ops must use.
Eigen::VectorXd model_rope_inv_freq(const ModelConfig& c);
double model_attn_scale(const ModelConfig& c);

template <class S>
class Model {
 public:
  // Checks the weights against the config (validate_weights) and throws InputError on mismatch.
  // `f` must outlive the model.
  Model(const GgufFile& f, const ModelConfig& c, ModelOptions opt = {});
  ~Model();
  Model(Model&&) noexcept;

  const ModelConfig& config() const { return c_; }
  const ModelOptions& options() const { return opt_; }

  // Processes ids at positions n_past()..n_past()+T-1, using and extending every layer's caches.
  // Returns logits [T, vocab]. `forced` (may be null): the indexer selections and expert ids this pass
  // uses instead of its own (core/decisions.h); its own are still computed and recorded.
  Mat<S> forward(std::span<const int32_t> ids, Trace* trace = nullptr, const ForcedDecisions* forced = nullptr);
  // The same, but the final norm and output head run on the last position only: logits [1, vocab]
  // (final_norm / logits are then recorded as [1, ...]). What generation uses: a long prefill costs one
  // vocab row, not T.
  Mat<S> forward_last(std::span<const int32_t> ids, Trace* trace = nullptr, const ForcedDecisions* forced = nullptr);

  // Runs layers [l_begin, l_end) on given hidden states [T, E] at positions pos0..pos0+T-1 and
  // returns the hidden state after layer l_end-1. Each layer's caches must hold exactly pos0 rows
  // (a fresh model: pos0 = 0); they are extended. l_begin must be a full indexer layer or have its
  // source layer inside the range. Does not move n_past() (forward() does).
  Mat<S> forward_layers(const Mat<S>& hidden, int64_t pos0, int64_t l_begin, int64_t l_end, Trace* trace = nullptr,
                        const ForcedDecisions* forced = nullptr);

  // Embedding rows [T, E]; final norm + output head [T, vocab] (records final_norm, logits).
  Mat<S> embed(std::span<const int32_t> ids);
  Mat<S> head(const Mat<S>& hidden, Trace* trace = nullptr);

  void reset();                 // empties every cache; n_past() = 0
  int64_t n_past() const { return n_past_; }

  // Greedy generation: prefill `prompt` (continuing from n_past()), then n_new decode steps with the
  // caches. on_step(step, token, margin) is called as each token is chosen.
  using StepCallback = std::function<void(int64_t step, int32_t token, double margin)>;
  GenerateResult generate(std::span<const int32_t> prompt, int64_t n_new, const StepCallback& on_step = {},
                          Trace* trace = nullptr);

  // The weights (lazily dequantized), e.g. to release a layer or read the expert-cache statistics.
  Weights<S>& weights();

  // Rows held by layer l's latent cache [rows, kv_lora+rope] (a copy).
  Mat<S> latent_cache(int64_t layer) const;

 private:
  struct Impl;
  ModelConfig c_;
  ModelOptions opt_;
  int64_t n_past_ = 0;
  std::unique_ptr<Impl> impl_;
};

extern template class Model<float>;
extern template class Model<double>;

}  // namespace mlaconf::ref
