// mlaconf reference: the elementwise and row-wise operations of GLM-5, one function each.
//
// Everything is templated on the scalar type (instantiated for float and double) and works on
// row-major Eigen matrices: one row per token. Shapes are given as [rows, cols].
#pragma once
#include <Eigen/Core>
#include <cstdint>

namespace mlaconf::ref {

// Row-major dynamic matrix and column vector: the only tensor types of the reference.
template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S>
using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
using MatI = Eigen::Matrix<int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// y[t] = w ⊙ x[t] / sqrt(mean(x[t]²) + eps).  x [T, D], w [D] -> [T, D].
template <class S>
Mat<S> rmsnorm(const Mat<S>& x, const Vec<S>& w, double eps);

// y[t] = w ⊙ (x[t] - mean) / sqrt(var + eps) + b, biased variance.  x [T, D], w, b [D] -> [T, D].
template <class S>
Mat<S> layernorm(const Mat<S>& x, const Vec<S>& w, const Vec<S>& b, double eps);

enum class RopeStyle {
  Interleaved,  // pairs (2i, 2i+1): GLM-5 MLA and indexer, DeepSeek MLA (llama.cpp ROPE_TYPE_NORM)
  NeoX,         // pairs (i, i + d/2): DeepSeek-V3.2 indexer
};

// RoPE parameters shared by every rotation of a model. inv_freq_i = theta^(-2i/d) (optionally
// YaRN-corrected, see rope_inv_freq). Angles pos * inv_freq_i are computed in double for every
// scalar type: float angles lose ~1e-4 rad at position 4096, which no tolerance should absorb.
struct RopeParams {
  int64_t dim = 0;            // rotated values per vector (n_rot)
  double theta = 10000.0;
  // YaRN (DeepSeek style); factor 0 = none.
  double yarn_factor = 0.0;
  int64_t yarn_orig_ctx = 0;
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
};
// inv_freq [dim/2] in double.
Eigen::VectorXd rope_inv_freq(const RopeParams& p);

// Rotates `n` vectors in place: x [n rows, stride], values [col0, col0 + p.dim) of row r at position
// pos[r]. inv_freq from rope_inv_freq(p).
template <class S>
void rope_inplace(Mat<S>& x, int64_t col0, const int64_t* pos, const Eigen::VectorXd& inv_freq, RopeStyle style);

// rope_inplace on each of n_head heads of width head_dim: x [n, n_head*head_dim], head h's values
// [h*head_dim + col0, h*head_dim + col0 + 2*inv_freq.size()) of row r at position pos[r]. MLA queries rotate
// their q_pe (col0 = nope), the indexer's queries their first values (col0 = 0).
template <class S>
void rope_heads_inplace(Mat<S>& x, int64_t n_head, int64_t head_dim, int64_t col0, const int64_t* pos,
                        const Eigen::VectorXd& inv_freq, RopeStyle style);

// silu(gate) ⊙ up, elementwise.  [T, F] each -> [T, F].
template <class S>
Mat<S> silu_gate(const Mat<S>& gate, const Mat<S>& up);

// SwiGLU MLP: down · (silu(gate · x) ⊙ up · x).  x [T, E]; gate, up [F, E]; down [E, F] -> [T, E].
template <class S>
Mat<S> swiglu_mlp(const Mat<S>& x, const Mat<S>& gate, const Mat<S>& up, const Mat<S>& down);

// Numerically stable softmax of a vector (max subtracted); -inf entries get probability 0.
template <class S>
Vec<S> softmax(const Vec<S>& x);

// 1 / (1 + exp(-x)), elementwise, in S.
template <class S>
Mat<S> sigmoid(const Mat<S>& x);

// Linear layer with ggml's convention: W is [out, in] (ne {in, out}), y[t] = W x[t].  x [T, in] -> [T, out].
template <class S>
Mat<S> linear(const Mat<S>& x, const Mat<S>& W);

}  // namespace mlaconf::ref
