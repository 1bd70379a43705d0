// mlaconf reference: the DSA lightning indexer: scores, causal top-k, tie and gap diagnostics.
//
//   q_I = indexer.attn_q_b · cq                 [T, Hi, Di], RoPE on the FIRST rope values of each head
//                                                                                  indexer_queries
//   k_I = LayerNorm(indexer.attn_k · x)         [T, Di] (eps 1e-6, weight and bias), RoPE on the first rope values
//                                                                                  indexer_keys
//   w   = indexer.proj · x                      [T, Hi]                            linear (ops.h)
//   score[s,t] = Σ_h w[s,h] · (Hi·Di)^-1/2 · ReLU(q_I[s,h] · k_I[t]),  t ≤ s (absolute positions)
//                                                                                  indexer_scores
// Each query keeps the min(top_k, s+1) highest scores; on equal scores the LOWER token index wins.
//                                                                                  topk_lower_index
#pragma once
#include <cstdint>
#include <vector>

#include "reference/ops.h"

namespace mlaconf::ref {

// The indexer's queries of T tokens: q_I = RoPE(attn_q_b · cq) on the first rope values of each head.
// cq [T, q_lora] (the MLA's normed query latent), w_q_b [Hi*Di, q_lora], pos [T] absolute positions,
// inv_freq [rope/2] -> [T, Hi*Di]. (DeepSeek's Indexer.forward: q = wq_b(qr), rotary on q_pe.)
template <class S>
Mat<S> indexer_queries(const Mat<S>& cq, const Mat<S>& w_q_b, int64_t n_head, const int64_t* pos,
                       const Eigen::VectorXd& inv_freq, RopeStyle style);

// The indexer's keys of T tokens: k_I = RoPE(LayerNorm(attn_k · x)) (eps 1e-6, weight and bias) on the
// first rope values. x [T, E], w_k [Di, E], norm_w, norm_b [Di] -> [T, Di], the rows a token adds to the
// indexer key cache. (DeepSeek: k = k_norm(wk(x)), rotary on k_pe.)
template <class S>
Mat<S> indexer_keys(const Mat<S>& x, const Mat<S>& w_k, const Vec<S>& norm_w, const Vec<S>& norm_b, const int64_t* pos,
                    const Eigen::VectorXd& inv_freq, RopeStyle style);

// Scores of T queries at absolute positions pos0..pos0+T-1 against L cached keys (L ≥ pos0 + T is
// not required: keys beyond the query's position are masked). q [T, Hi*Di], k [L, Di], w [T, Hi]
// -> [T, L], -inf where t > pos0 + s.
template <class S>
Mat<S> indexer_scores(const Mat<S>& q, const Eigen::Ref<const Mat<S>>& k, const Mat<S>& w, int64_t n_head, int64_t pos0);

struct TopK {
  int64_t k = 0;              // columns per row (the configured top_k)
  MatI idx;                   // [T, k] ascending token indices, -1 padded
  std::vector<uint8_t> tie;   // [T] 1 = the k-th and (k+1)-th scores are equal
  std::vector<double> gap;    // [T] k-th minus (k+1)-th score; NaN when the row has ≤ k causal keys
};

// Causal top-k of every row (finite entries only; -inf = masked). Stable: on equal scores the lower
// index wins. Row s keeps min(k, number of finite entries) indices, ascending, -1 padded.
template <class S>
TopK topk_lower_index(const Mat<S>& scores, int64_t k);

// Every causal token (dense attention, the indexer ignored; the negative control): [T, pos0+T],
// row s lists 0..pos0+s then -1.
TopK dense_selection(int64_t T, int64_t pos0);

}  // namespace mlaconf::ref
