// mlaconf reference: Multi-head Latent Attention over a selected set of cached tokens.
//
// The latent cache holds one row of kv_lora + rope values per token: [c_t (RMSNorm'd latent) | k_pe_t
// (roped)]. Attention of query s uses exactly the tokens listed in its selection (the indexer's
// top-k; -1 = empty slot). Two forms, equal up to rounding:
//   naive:    k_nope[h,t] = W_UK[h] c_t, v[h,t] = W_UV[h] c_t, score = scale (q_nope·k_nope + q_pe·k_pe)
//   absorbed: q_lat[h] = W_UK[h]^T q_nope[h]; score = scale [q_lat|q_pe]·[c_t|k_pe_t];
//             o_lat[h] = Σ_t P c_t, then o[h] = W_UV[h] o_lat[h]
// scale = 1/sqrt(qk_nope + qk_rope) (times YaRN mscale² where that applies), never 1/sqrt(576).
#pragma once
#include <cstdint>
#include <vector>

#include "reference/ops.h"

namespace mlaconf::ref {

enum class MlaForm { Absorbed, Naive };

// The absorbed query of one token: q_abs[h] = [kb[h] q_nope[h] | q_pe[h]].
// q_nope [H, nope], q_pe [H, rope] (roped), kb: H x [kv_lora, nope] (attn_k_b) -> [H, kv_lora + rope].
template <class S>
Mat<S> absorb_query(const Mat<S>& q_nope, const Mat<S>& q_pe, const std::vector<Mat<S>>& kb);

// Sparse attention of one query token in the absorbed form (the kernel's contract).
// q [H, D] (D = kv_lora + rope, e.g. 576), cache [L, D], idx [n_idx] (-1 = none; each index < L),
// d_v = kv_lora (the leading value columns of the cache) -> [H, d_v]. A query with no valid index
// gives zeros. Duplicated indices are counted once each (the caller's top-k never has duplicates).
// The cache is taken by Ref: a Mat, or a block of the first rows of a larger buffer, without a copy.
template <class S>
using CRef = Eigen::Ref<const Mat<S>>;

template <class S>
Mat<S> sparse_mla_absorbed(const Mat<S>& q, const CRef<S>& cache, const int32_t* idx, int64_t n_idx, int64_t d_v,
                           double scale);

// The same attention of one query token in the naive form: k and v expanded per head from the latent.
// q_nope [H, nope], q_pe [H, rope]; cache [L, kv_lora + rope]; kb: H x [kv_lora, nope]; vb: H x [v, kv_lora]
// -> [H, v]. A query with no valid index gives zeros.
template <class S>
Mat<S> sparse_mla_naive(const Mat<S>& q_nope, const Mat<S>& q_pe, const CRef<S>& cache, const int32_t* idx,
                        int64_t n_idx, const std::vector<Mat<S>>& kb, const std::vector<Mat<S>>& vb, double scale);

// o[h] = vb[h] o_lat[h]: o_lat [H, kv_lora], vb: H x [v, kv_lora] -> [H, v].
template <class S>
Mat<S> apply_v_up(const Mat<S>& o_lat, const std::vector<Mat<S>>& vb);

// A growable [rows, cols] cache (latent rows or indexer keys) with amortized appends.
template <class S>
class RowCache {
 public:
  explicit RowCache(int64_t cols = 0) : cols_(cols) {}
  int64_t rows() const { return n_; }
  int64_t cols() const { return cols_; }
  void clear() { n_ = 0; }
  void append(const Mat<S>& rows);  // rows [k, cols]
  // The first rows() rows (a view without a copy; valid until the next append).
  CRef<S> view() const { return CRef<S>(buf_.topRows(n_)); }
  Mat<S> copy() const { return buf_.topRows(n_); }

 private:
  int64_t cols_ = 0;
  int64_t n_ = 0;
  Mat<S> buf_;
};

}  // namespace mlaconf::ref
