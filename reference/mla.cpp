// mlaconf reference: Multi-head Latent Attention, naive and absorbed (see mla.h).
#include "reference/mla.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace mlaconf::ref {

namespace {
// The valid entries of a selection (-1 = empty slot), checked against the cache length.
std::vector<int32_t> valid_indices(const int32_t* idx, int64_t n_idx, int64_t L) {
  std::vector<int32_t> v;
  v.reserve(static_cast<size_t>(n_idx));
  for (int64_t i = 0; i < n_idx; ++i) {
    if (idx[i] < 0) continue;
    if (idx[i] >= L)
      throw std::out_of_range("sparse MLA: index " + std::to_string(idx[i]) + " beyond the cache (" +
                              std::to_string(L) + " rows)");
    v.push_back(idx[i]);
  }
  return v;
}

// Row-wise softmax of scores [H, K] in place.
template <class S>
void softmax_rows(Mat<S>& s) {
  for (Eigen::Index h = 0; h < s.rows(); ++h) {
    Vec<S> r = s.row(h).transpose();
    s.row(h) = softmax<S>(r).transpose();
  }
}
}  // namespace

template <class S>
Mat<S> absorb_query(const Mat<S>& q_nope, const Mat<S>& q_pe, const std::vector<Mat<S>>& kb) {
  // q_lat[h] = kb[h] q_nope[h]: kb[h] [kv_lora, nope] (= W_UK[h]^T), q_nope[h] [nope] -> [kv_lora]
  const int64_t H = q_nope.rows();
  if (static_cast<int64_t>(kb.size()) != H) throw std::invalid_argument("absorb_query: head count mismatch");
  const int64_t dl = kb[0].rows(), R = q_pe.cols();
  Mat<S> q(H, dl + R);
  for (int64_t h = 0; h < H; ++h) {
    q.row(h).head(dl) = (kb[h] * q_nope.row(h).transpose()).transpose();
    q.row(h).tail(R) = q_pe.row(h);
  }
  return q;
}

template <class S>
Mat<S> sparse_mla_absorbed(const Mat<S>& q, const CRef<S>& cache, const int32_t* idx, int64_t n_idx, int64_t d_v,
                           double scale) {
  // q [H, D], cache [L, D] -> [H, d_v]
  if (q.cols() != cache.cols()) throw std::invalid_argument("sparse_mla_absorbed: query and cache widths differ");
  if (d_v < 0 || d_v > cache.cols()) throw std::invalid_argument("sparse_mla_absorbed: bad value width");
  const std::vector<int32_t> sel = valid_indices(idx, n_idx, cache.rows());
  const int64_t H = q.rows(), K = static_cast<int64_t>(sel.size());
  Mat<S> out = Mat<S>::Zero(H, d_v);
  if (K == 0) return out;
  Mat<S> G(K, cache.cols());  // gathered cache rows [K, D]
  for (int64_t j = 0; j < K; ++j) G.row(j) = cache.row(sel[j]);
  Mat<S> P = (q * G.transpose()) * static_cast<S>(scale);  // [H, K]
  softmax_rows<S>(P);
  out = P * G.leftCols(d_v);  // o_lat[h] = Σ_t P[h,t] c_t
  return out;
}

template <class S>
Mat<S> sparse_mla_naive(const Mat<S>& q_nope, const Mat<S>& q_pe, const CRef<S>& cache, const int32_t* idx,
                        int64_t n_idx, const std::vector<Mat<S>>& kb, const std::vector<Mat<S>>& vb, double scale) {
  const int64_t H = q_nope.rows(), R = q_pe.cols();
  const int64_t dl = cache.cols() - R;
  const int64_t dv = vb.at(0).rows();
  const std::vector<int32_t> sel = valid_indices(idx, n_idx, cache.rows());
  const int64_t K = static_cast<int64_t>(sel.size());
  Mat<S> out = Mat<S>::Zero(H, dv);
  if (K == 0) return out;
  Mat<S> C(K, dl), Kpe(K, R);  // selected latents [K, kv_lora] and roped keys [K, rope]
  for (int64_t j = 0; j < K; ++j) {
    C.row(j) = cache.row(sel[j]).head(dl);
    Kpe.row(j) = cache.row(sel[j]).tail(R);
  }
  for (int64_t h = 0; h < H; ++h) {
    Mat<S> k_nope = C * kb[h];               // [K, nope] = (W_UK[h] c_t)^T
    Mat<S> v = C * vb[h].transpose();        // [K, v]    = (W_UV[h] c_t)^T
    Vec<S> s = (k_nope * q_nope.row(h).transpose() + Kpe * q_pe.row(h).transpose()) * static_cast<S>(scale);
    Vec<S> p = softmax<S>(s);
    out.row(h) = (v.transpose() * p).transpose();
  }
  return out;
}

template <class S>
Mat<S> apply_v_up(const Mat<S>& o_lat, const std::vector<Mat<S>>& vb) {
  // o[h] = vb[h] o_lat[h]: [v, kv_lora] x [kv_lora] -> [v]
  const int64_t H = o_lat.rows(), dv = vb.at(0).rows();
  Mat<S> o(H, dv);
  for (int64_t h = 0; h < H; ++h) o.row(h) = (vb[h] * o_lat.row(h).transpose()).transpose();
  return o;
}

template <class S>
void RowCache<S>::append(const Mat<S>& rows) {
  if (rows.cols() != cols_) throw std::invalid_argument("RowCache: row width mismatch");
  const int64_t need = n_ + rows.rows();
  if (need > buf_.rows()) {
    int64_t cap = std::max<int64_t>(need, std::max<int64_t>(16, 2 * buf_.rows()));
    Mat<S> nb(cap, cols_);
    nb.topRows(n_) = buf_.topRows(n_);
    buf_.swap(nb);
  }
  buf_.middleRows(n_, rows.rows()) = rows;
  n_ = need;
}

#define MLACONF_INSTANTIATE_MLA(S)                                                                                 \
  template Mat<S> absorb_query<S>(const Mat<S>&, const Mat<S>&, const std::vector<Mat<S>>&);                     \
  template Mat<S> sparse_mla_absorbed<S>(const Mat<S>&, const CRef<S>&, const int32_t*, int64_t, int64_t, double); \
  template Mat<S> sparse_mla_naive<S>(const Mat<S>&, const Mat<S>&, const CRef<S>&, const int32_t*, int64_t,      \
                                      const std::vector<Mat<S>>&, const std::vector<Mat<S>>&, double);           \
  template Mat<S> apply_v_up<S>(const Mat<S>&, const std::vector<Mat<S>>&);                                      \
  template class RowCache<S>;
MLACONF_INSTANTIATE_MLA(float)
MLACONF_INSTANTIATE_MLA(double)

}  // namespace mlaconf::ref
