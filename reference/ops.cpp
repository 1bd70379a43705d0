// mlaconf reference: elementwise and row-wise operations (see ops.h).
#include "reference/ops.h"

#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>

#include "reference/threads.h"

namespace mlaconf::ref {

namespace {
// linear() splits a product over threads by the weight's rows (output features) where it has enough of
// them: each thread then packs only its share of the weight (an expert's 2048 x 6144 matrices against a
// few dozen token rows). Blocks of weight rows start at multiples of kPanelRows, a multiple of Eigen's
// row panel (3 SIMD packets: 48 floats or 24 doubles with AVX-512), so every output value is computed by
// the same micro-kernel as in the whole product. Otherwise it splits by token rows, at least
// kMinRowsPerThread each.
constexpr int64_t kPanelRows = 48;
constexpr int64_t kMinWeightRowsPerThread = 2 * kPanelRows;
constexpr int64_t kMinRowsPerThread = 32;
}  // namespace

template <class S>
Mat<S> rmsnorm(const Mat<S>& x, const Vec<S>& w, double eps) {
  // x [T, D] -> [T, D]
  Mat<S> y(x.rows(), x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    S ms = x.row(t).squaredNorm() / static_cast<S>(x.cols());
    S inv = S(1) / std::sqrt(ms + static_cast<S>(eps));
    y.row(t) = (x.row(t) * inv).cwiseProduct(w.transpose());
  }
  return y;
}

template <class S>
Mat<S> layernorm(const Mat<S>& x, const Vec<S>& w, const Vec<S>& b, double eps) {
  // x [T, D] -> [T, D]; biased variance (torch.nn.LayerNorm)
  Mat<S> y(x.rows(), x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    S mean = x.row(t).mean();
    auto centered = (x.row(t).array() - mean).matrix();
    S var = centered.squaredNorm() / static_cast<S>(x.cols());
    S inv = S(1) / std::sqrt(var + static_cast<S>(eps));
    y.row(t) = (centered * inv).cwiseProduct(w.transpose()) + b.transpose();
  }
  return y;
}

Eigen::VectorXd rope_inv_freq(const RopeParams& p) {
  // inv_freq_i = theta^(-2i/d), i = 0..d/2-1
  const int64_t half = p.dim / 2;
  Eigen::VectorXd f(half);
  for (int64_t i = 0; i < half; ++i) f[i] = std::pow(p.theta, -2.0 * static_cast<double>(i) / static_cast<double>(p.dim));
  if (p.yarn_factor > 1.0 && p.yarn_orig_ctx > 0) {
    // YaRN (DeepSeek / HF "yarn"): interpolate the low frequencies by 1/factor, keep the high ones,
    // with a linear ramp between the dims where beta_fast / beta_slow rotations fit in orig_ctx.
    const double d = static_cast<double>(p.dim);
    auto corr_dim = [&](double rot) {
      return d * std::log(static_cast<double>(p.yarn_orig_ctx) / (rot * 2 * std::numbers::pi)) / (2 * std::log(p.theta));
    };
    double lo = std::floor(corr_dim(p.yarn_beta_fast));
    double hi = std::ceil(corr_dim(p.yarn_beta_slow));
    lo = std::max(lo, 0.0);
    hi = std::min(hi, d - 1);
    if (lo == hi) hi += 0.001;
    for (int64_t i = 0; i < half; ++i) {
      double ramp = std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0);
      double extrapolation = 1.0 - ramp;  // 1: keep the original frequency
      f[i] = f[i] / p.yarn_factor * (1.0 - extrapolation) + f[i] * extrapolation;
    }
  }
  return f;
}

template <class S>
void rope_inplace(Mat<S>& x, int64_t col0, const int64_t* pos, const Eigen::VectorXd& inv_freq, RopeStyle style) {
  // x [n, stride]: rotates x[r, col0 : col0 + 2*half] at position pos[r].
  const int64_t half = inv_freq.size();
  if (col0 < 0 || col0 + 2 * half > x.cols()) throw std::invalid_argument("rope_inplace: slice out of range");
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    S* v = x.row(r).data() + col0;
    for (int64_t i = 0; i < half; ++i) {
      const double ang = static_cast<double>(pos[r]) * inv_freq[i];
      const S c = static_cast<S>(std::cos(ang)), s = static_cast<S>(std::sin(ang));
      const int64_t a = style == RopeStyle::Interleaved ? 2 * i : i;
      const int64_t b = style == RopeStyle::Interleaved ? 2 * i + 1 : i + half;
      const S x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x1 * c + x0 * s;
    }
  }
}

template <class S>
void rope_heads_inplace(Mat<S>& x, int64_t n_head, int64_t head_dim, int64_t col0, const int64_t* pos,
                        const Eigen::VectorXd& inv_freq, RopeStyle style) {
  // x [n, n_head*head_dim]
  if (x.cols() != n_head * head_dim || col0 < 0 || col0 + 2 * inv_freq.size() > head_dim)
    throw std::invalid_argument("rope_heads_inplace: heads and slice do not fit the row");
  for (int64_t h = 0; h < n_head; ++h) rope_inplace<S>(x, h * head_dim + col0, pos, inv_freq, style);
}

template <class S>
Mat<S> silu_gate(const Mat<S>& gate, const Mat<S>& up) {
  // silu(g) = g / (1 + exp(-g))
  return (gate.array() / (S(1) + (-gate.array()).exp()) * up.array()).matrix();
}

template <class S>
Mat<S> linear(const Mat<S>& x, const Mat<S>& W) {
  // x [T, in], W [out, in] -> [T, out]
  if (x.cols() != W.cols()) throw std::invalid_argument("linear: input width does not match the weight");
  // Blocks over the threads: each block's product computes its values exactly as the whole product does
  // (threads.h), so the result does not depend on the thread count.
  Mat<S> y(x.rows(), W.rows());
  if (W.rows() >= 2 * kMinWeightRowsPerThread) {
    for_row_blocks(
        W.rows(), kMinWeightRowsPerThread,
        [&](int64_t b, int64_t e) { y.middleCols(b, e - b).noalias() = x * W.middleRows(b, e - b).transpose(); },
        kPanelRows);
  } else {
    for_row_blocks(x.rows(), kMinRowsPerThread, [&](int64_t b, int64_t e) {
      y.middleRows(b, e - b).noalias() = x.middleRows(b, e - b) * W.transpose();
    });
  }
  return y;
}

template <class S>
Mat<S> swiglu_mlp(const Mat<S>& x, const Mat<S>& gate, const Mat<S>& up, const Mat<S>& down) {
  // x [T, E] -> g, u [T, F] -> [T, E]
  return linear<S>(silu_gate<S>(linear<S>(x, gate), linear<S>(x, up)), down);
}

template <class S>
Vec<S> softmax(const Vec<S>& x) {
  Vec<S> p(x.size());
  if (x.size() == 0) return p;
  const S m = x.maxCoeff();
  if (!std::isfinite(static_cast<double>(m))) {
    p.setZero();
    return p;
  }
  p = (x.array() - m).exp().matrix();
  return p / p.sum();
}

template <class S>
Mat<S> sigmoid(const Mat<S>& x) {
  return (S(1) / (S(1) + (-x.array()).exp())).matrix();
}

#define MLACONF_INSTANTIATE_OPS(S)                                                                   \
  template Mat<S> rmsnorm<S>(const Mat<S>&, const Vec<S>&, double);                                \
  template Mat<S> layernorm<S>(const Mat<S>&, const Vec<S>&, const Vec<S>&, double);               \
  template void rope_inplace<S>(Mat<S>&, int64_t, const int64_t*, const Eigen::VectorXd&, RopeStyle); \
  template void rope_heads_inplace<S>(Mat<S>&, int64_t, int64_t, int64_t, const int64_t*, const Eigen::VectorXd&, \
                                      RopeStyle);                                                       \
  template Mat<S> silu_gate<S>(const Mat<S>&, const Mat<S>&);                                      \
  template Mat<S> linear<S>(const Mat<S>&, const Mat<S>&);                                         \
  template Mat<S> swiglu_mlp<S>(const Mat<S>&, const Mat<S>&, const Mat<S>&, const Mat<S>&);       \
  template Vec<S> softmax<S>(const Vec<S>&);                                                        \
  template Mat<S> sigmoid<S>(const Mat<S>&);
MLACONF_INSTANTIATE_OPS(float)
MLACONF_INSTANTIATE_OPS(double)

}  // namespace mlaconf::ref
