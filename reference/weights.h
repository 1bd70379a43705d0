// mlaconf reference: the model's weights, dequantized from the GGUF only when first used.
//
// Dense tensors are dequantized to Scalar matrices on first access and kept. Routed experts are
// dequantized one expert at a time, only when a token routes to it, into an LRU cache bounded by a
// byte budget (a real GLM-5 layer holds 256 experts, ~38 GB as float). ggml layouts:
//   2-D {in, out}            -> Mat [out, in]   (y = W x)
//   attn_k_b {nope, kv_lora, H} -> H x Mat [kv_lora, nope]   (= W_UK^T per head)
//   attn_v_b {kv_lora, v, H}    -> H x Mat [v, kv_lora]      (= W_UV per head)
//   ffn_*_exps {in, out, E}     -> per expert Mat [out, in]
#pragma once
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/model_config.h"
#include "reference/ops.h"

namespace mlaconf::ref {

template <class S>
struct ExpertWeights {
  Mat<S> gate;  // [n_ff_exp, E]
  Mat<S> up;    // [n_ff_exp, E]
  Mat<S> down;  // [E, n_ff_exp]
  size_t bytes() const { return sizeof(S) * static_cast<size_t>(gate.size() + up.size() + down.size()); }
};

template <class S>
class Weights {
 public:
  // `expert_cache_bytes`: the most bytes routed experts may occupy at once (at least one expert is
  // always kept, whatever the budget).
  Weights(const GgufFile& f, const ModelConfig& c, size_t expert_cache_bytes);

  const GgufFile& file() const { return f_; }
  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

  // A 1-D tensor as a vector (norm weights, biases).
  const Vec<S>& vec(const std::string& name);
  // A 2-D tensor {in, out} as [out, in].
  const Mat<S>& mat(const std::string& name);
  // A 3-D per-head tensor {a, b, H} as H matrices [b, a].
  const std::vector<Mat<S>>& per_head(const std::string& name);
  // Rows of token_embd for the given ids, dequantized row by row (the table is never expanded). [T, E]
  Mat<S> embed_rows(const int32_t* ids, int64_t n);
  // x [T, in] times the 2-D tensor {in, out} transposed: [T, out] (the output head). A tensor of at most
  // kStreamAboveBytes as S is dequantized once and kept (mat()); a larger one, such as GLM-5's 154880 x 6144
  // head (3.8 GB as float, 7.6 GB as double), is dequantized kStreamBlockBytes of rows at a time, each
  // block multiplied and dropped, and never kept: the peak is one block, at the cost of dequantizing it
  // again on every pass.
  static constexpr size_t kStreamAboveBytes = size_t{512} << 20;
  static constexpr size_t kStreamBlockBytes = size_t{128} << 20;
  Mat<S> linear_streamed(const std::string& name, const Mat<S>& x);
  // The blocked product with `block_rows` rows per block, whatever the size (tests compare it with the
  // whole matrix).
  Mat<S> linear_blocked(const std::string& name, const Mat<S>& x, int64_t block_rows);
  // Routed expert e of layer l (gate, up, down), through the LRU cache.
  const ExpertWeights<S>& expert(int64_t layer, int64_t e);
  // The same for callers that run side by side (experts in flight, reference/moe.h), each with its own
  // `spare`: the cached expert if there is one; else e dequantized into *spare (made if empty, its buffers
  // reused), which then joins the cache if it fits the budget without dropping another expert (spare is
  // then empty again). Nothing is dropped from the cache here, so every reference handed out stays valid
  // until the next call with the same spare, expert() or release_layer(). Safe to call concurrently with
  // itself, not with the other members.
  const ExpertWeights<S>& expert_in_flight(int64_t layer, int64_t e, std::unique_ptr<ExpertWeights<S>>& spare);
  // Bytes of one routed expert of layer l as S.
  size_t expert_bytes(int64_t layer) const;

  // Drops every cached dense tensor of layer l and its routed experts in the cache (e.g. after capturing
  // it: in one pass each expert runs once, so keeping it only holds memory).
  void release_layer(int64_t layer);

  // Statistics.
  size_t dense_bytes() const { return dense_bytes_; }
  size_t expert_cache_bytes() const { return expert_bytes_; }
  int64_t expert_loads() const { return expert_loads_; }   // dequantizations performed
  int64_t expert_hits() const { return expert_hits_; }

 private:
  const TensorInfo& info(const std::string& name, int n_dims) const;
  // Dequantizes rows [row0, row0 + nrows) straight into dst (nrows * ne0 values), through a bounded
  // float staging buffer: a 1-GB tensor never exists twice in memory.
  void load_into(const TensorInfo& t, int64_t row0, int64_t nrows, S* dst) const;
  // The gate, up and down tensors of layer l's routed experts, checked to hold expert e.
  void expert_tensors(int64_t layer, int64_t e, const TensorInfo* ts[3]) const;
  // Expert e of those tensors into w (its buffers reused where the shapes match).
  void load_expert(const TensorInfo* const ts[3], int64_t e, ExpertWeights<S>& w) const;

  const GgufFile& f_;
  ModelConfig c_;
  size_t budget_;
  std::map<std::string, Vec<S>> vecs_;
  std::map<std::string, Mat<S>> mats_;
  std::map<std::string, std::vector<Mat<S>>> heads_;
  size_t dense_bytes_ = 0;
  // LRU: most recent at the front.
  using Key = std::pair<int64_t, int64_t>;
  std::list<std::pair<Key, std::unique_ptr<ExpertWeights<S>>>> lru_;
  std::map<Key, typename decltype(lru_)::iterator> lru_index_;
  size_t expert_bytes_ = 0;
  std::mutex mu_;  // the cache and the statistics, in expert_in_flight
  int64_t expert_loads_ = 0;
  int64_t expert_hits_ = 0;
};

}  // namespace mlaconf::ref
