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

// ---- The same steps over T query rows: what Model runs, one call per step of a layer -------------------
// Rows are tokens; a row holds its H heads one after the other ([T, H*d] = [T, H, d] row-major). The
// single-token functions above are these with T = 1 (sparse_mla_naive gathers its selected rows first).
// Each step in DeepSeek's inference/model.py terms (MLA.forward):
//   kv_a            = wkv_a(x)                                             linear()
//   latent          = [kv_norm(kv) | rotary(k_pe)]                         mla_latent
//   q               = wq_b(q_norm(wq_a(x))), rotary on q_pe                linear(), rope_heads_inplace()
//   absorbed:  q_abs = [einsum("shd,hdc->shc", q_nope, wkv_b[:, :nope]) | q_pe]    absorb_query_rows
//              o_lat = softmax(scale q_abs · cache^T over the selection) cache[:, :kv_lora]
//                                                                          sparse_mla_absorbed_rows
//              o     = einsum("shc,hdc->shd", o_lat, wkv_b[:, -v:])         apply_v_up_rows
//   naive:     k_nope, v = wkv_b(latent) of every cached token; softmax(scale (q_nope·k_nope + q_pe·k_pe)) v
//                                                                          sparse_mla_naive_rows

// latent = [RMSNorm(kv_a[:, :kv_lora]) | RoPE(kv_a[:, kv_lora:])] (interleaved), the row a token adds to
// the latent cache. kv_a [T, kv_lora + rope], kv_norm [kv_lora] (kv_lora = its size), pos [T] absolute
// positions, inv_freq [rope/2] -> [T, kv_lora + rope].
template <class S>
Mat<S> mla_latent(const Mat<S>& kv_a, const Vec<S>& kv_norm, double eps, const int64_t* pos,
                  const Eigen::VectorXd& inv_freq);

// The absorbed queries of T tokens: q [T, H*(nope+rope)] (per head [q_nope | q_pe], q_pe roped),
// kb: H x [kv_lora, nope] -> [T, H*(kv_lora+rope)], per head [kb[h] q_nope | q_pe].
template <class S>
Mat<S> absorb_query_rows(const Mat<S>& q, const std::vector<Mat<S>>& kb, int64_t nope);

// sparse_mla_absorbed of each of T query rows over one cache: q_abs [T, H*D] (D = cache width),
// idx [T, n_idx] (row s = query s's selection, -1 = none), d_v = kv_lora -> o_lat [T, H*d_v].
template <class S>
Mat<S> sparse_mla_absorbed_rows(const Mat<S>& q_abs, const CRef<S>& cache, const MatI& idx, int64_t d_v,
                                double scale);

// o[s,h] = vb[h] o_lat[s,h]: o_lat [T, H*kv_lora], vb: H x [v, kv_lora] -> [T, H*v].
template <class S>
Mat<S> apply_v_up_rows(const Mat<S>& o_lat, const std::vector<Mat<S>>& vb);

// Naive sparse MLA of T query rows (as Hugging Face runs it): k_nope[h] = cache[:, :kv_lora] kb[h] and
// v[h] = cache[:, :kv_lora] vb[h]^T expanded for EVERY cached row once, then each query attends to its
// selection. q [T, H*(nope+rope)] (q_pe roped), cache [L, kv_lora + rope], idx [T, n_idx] (-1 = none,
// each index < L), kb: H x [kv_lora, nope], vb: H x [v, kv_lora] -> [T, H*v]. A row with no valid
// index gives zeros.
template <class S>
Mat<S> sparse_mla_naive_rows(const Mat<S>& q, const CRef<S>& cache, const MatI& idx, const std::vector<Mat<S>>& kb,
                             const std::vector<Mat<S>>& vb, double scale);

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
