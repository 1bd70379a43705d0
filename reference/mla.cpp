// mlaconf reference: Multi-head Latent Attention, naive and absorbed (see mla.h).
#include "reference/mla.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "reference/threads.h"

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

// One token's query as the rows functions take it: q_nope [H, nope], q_pe [H, rope] -> [1, H*(nope+rope)],
// per head [q_nope | q_pe].
template <class S>
Mat<S> one_row_query(const Mat<S>& q_nope, const Mat<S>& q_pe) {
  const int64_t H = q_nope.rows(), dn = q_nope.cols(), R = q_pe.cols();
  if (q_pe.rows() != H) throw std::invalid_argument("MLA: q_nope and q_pe head counts differ");
  Mat<S> q(1, H * (dn + R));
  for (int64_t h = 0; h < H; ++h) {
    q.row(0).segment(h * (dn + R), dn) = q_nope.row(h);
    q.row(0).segment(h * (dn + R) + dn, R) = q_pe.row(h);
  }
  return q;
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
Mat<S> mla_latent(const Mat<S>& kv_a, const Vec<S>& kv_norm, double eps, const int64_t* pos,
                  const Eigen::VectorXd& inv_freq) {
  // kv_a [T, kv_lora + rope] = [c | k_pe] -> [RMSNorm(c) | RoPE(k_pe)]
  const int64_t T = kv_a.rows(), dl = kv_norm.size(), R = kv_a.cols() - dl;
  if (R != 2 * inv_freq.size()) throw std::invalid_argument("mla_latent: kv_a width is not kv_lora + rope");
  Mat<S> lat(T, dl + R);
  lat.leftCols(dl) = rmsnorm<S>(kv_a.leftCols(dl), kv_norm, eps);
  lat.rightCols(R) = kv_a.rightCols(R);
  rope_inplace<S>(lat, dl, pos, inv_freq, RopeStyle::Interleaved);
  return lat;
}

template <class S>
Mat<S> absorb_query_rows(const Mat<S>& q, const std::vector<Mat<S>>& kb, int64_t nope) {
  // q [T, H*(nope+rope)] -> [T, H*(kv_lora+rope)]; per head q_lat = q_nope kb[h]^T, one product of all T
  // rows per head (kb[h] [kv_lora, nope] = W_UK[h]^T).
  const int64_t T = q.rows(), H = static_cast<int64_t>(kb.size());
  if (H == 0 || q.cols() % H != 0) throw std::invalid_argument("absorb_query_rows: query width is not a multiple of the heads");
  const int64_t dq = q.cols() / H, R = dq - nope, dl = kb[0].rows();
  if (nope < 0 || R < 0) throw std::invalid_argument("absorb_query_rows: nope exceeds the head width");
  for (const Mat<S>& k : kb)
    if (k.rows() != dl || k.cols() != nope) throw std::invalid_argument("absorb_query_rows: kb is not H x [kv_lora, nope]");
  Mat<S> qabs(T, H * (dl + R));
  for_each_index(H, [&](int64_t h) {  // heads in parallel: each writes its own columns
    qabs.middleCols(h * (dl + R), dl) = q.middleCols(h * dq, nope) * kb[h].transpose();
    qabs.middleCols(h * (dl + R) + dl, R) = q.middleCols(h * dq + nope, R);
  });
  return qabs;
}

template <class S>
Mat<S> sparse_mla_absorbed_rows(const Mat<S>& q_abs, const CRef<S>& cache, const MatI& idx, int64_t d_v,
                                double scale) {
  // q_abs [T, H*D], cache [L, D], idx [T, n_idx] -> [T, H*d_v]
  const int64_t T = q_abs.rows(), D = cache.cols();
  if (D == 0 || q_abs.cols() % D != 0) throw std::invalid_argument("sparse_mla_absorbed_rows: query width is not heads x cache width");
  if (idx.rows() != T) throw std::invalid_argument("sparse_mla_absorbed_rows: selection rows differ from query rows");
  const int64_t H = q_abs.cols() / D;
  Mat<S> olat(T, H * d_v);
  for_each_index(T, [&](int64_t s) {  // query rows in parallel: each writes its own row
    Mat<S> qs = Eigen::Map<const Mat<S>>(q_abs.row(s).data(), H, D);  // [H, D]
    Mat<S> o = sparse_mla_absorbed<S>(qs, cache, idx.row(s).data(), idx.cols(), d_v, scale);
    olat.row(s) = Eigen::Map<const Vec<S>>(o.data(), H * d_v).transpose();
  });
  return olat;
}

template <class S>
Mat<S> apply_v_up_rows(const Mat<S>& o_lat, const std::vector<Mat<S>>& vb) {
  // o_lat [T, H*kv_lora] -> [T, H*v]; per head o = o_lat vb[h]^T, one product of all T rows per head.
  const int64_t T = o_lat.rows(), H = static_cast<int64_t>(vb.size());
  if (H == 0) throw std::invalid_argument("apply_v_up_rows: no heads");
  const int64_t dv = vb[0].rows(), dl = vb[0].cols();
  if (o_lat.cols() != H * dl) throw std::invalid_argument("apply_v_up_rows: o_lat is not [T, H*kv_lora]");
  for (const Mat<S>& v : vb)
    if (v.rows() != dv || v.cols() != dl) throw std::invalid_argument("apply_v_up_rows: vb is not H x [v, kv_lora]");
  Mat<S> out(T, H * dv);
  for_each_index(H, [&](int64_t h) { out.middleCols(h * dv, dv) = o_lat.middleCols(h * dl, dl) * vb[h].transpose(); });
  return out;
}

template <class S>
Mat<S> sparse_mla_naive_rows(const Mat<S>& q, const CRef<S>& cache, const MatI& idx, const std::vector<Mat<S>>& kb,
                             const std::vector<Mat<S>>& vb, double scale) {
  // q [T, H*(nope+rope)], cache [L, kv_lora+rope], idx [T, n_idx] -> [T, H*v]
  const int64_t T = q.rows(), H = static_cast<int64_t>(kb.size()), Lc = cache.rows();
  if (H == 0 || static_cast<int64_t>(vb.size()) != H) throw std::invalid_argument("sparse_mla_naive_rows: kb and vb head counts differ");
  if (idx.rows() != T) throw std::invalid_argument("sparse_mla_naive_rows: selection rows differ from query rows");
  const int64_t dl = kb[0].rows(), dn = kb[0].cols(), R = cache.cols() - dl, dq = dn + R, dv = vb[0].rows();
  if (R < 0 || q.cols() != H * dq) throw std::invalid_argument("sparse_mla_naive_rows: query width is not H x (nope + rope)");
  for (int64_t h = 0; h < H; ++h)
    if (kb[h].rows() != dl || kb[h].cols() != dn || vb[h].rows() != dv || vb[h].cols() != dl)
      throw std::invalid_argument("sparse_mla_naive_rows: kb / vb are not H x [kv_lora, nope] / [v, kv_lora]");
  // k_nope and v of every cached token, per head: [L, nope] and [L, v].
  std::vector<Mat<S>> kn(static_cast<size_t>(H)), vv(static_cast<size_t>(H));
  for_each_index(H, [&](int64_t h) {
    kn[h] = cache.leftCols(dl) * kb[h];
    vv[h] = cache.leftCols(dl) * vb[h].transpose();
  });
  Mat<S> out(T, H * dv);
  for_each_index(T, [&](int64_t s) {  // query rows in parallel: each writes its own row
    const std::vector<int32_t> ids = valid_indices(idx.row(s).data(), idx.cols(), Lc);
    for (int64_t h = 0; h < H; ++h) {
      if (ids.empty()) {
        out.row(s).segment(h * dv, dv).setZero();
        continue;
      }
      // score_j = scale (q_nope · k_nope[t_j] + q_pe · k_pe[t_j])
      Vec<S> sc(static_cast<Eigen::Index>(ids.size()));
      for (size_t j = 0; j < ids.size(); ++j)
        sc[j] = (kn[h].row(ids[j]).dot(q.row(s).segment(h * dq, dn)) +
                 cache.row(ids[j]).tail(R).dot(q.row(s).segment(h * dq + dn, R))) *
                static_cast<S>(scale);
      Vec<S> p = softmax<S>(sc);
      Vec<S> o = Vec<S>::Zero(dv);
      for (size_t j = 0; j < ids.size(); ++j) o += p[j] * vv[h].row(ids[j]).transpose();
      out.row(s).segment(h * dv, dv) = o.transpose();
    }
  });
  return out;
}

// ---- one query token: the rows functions with T = 1 --------------------------------------------------

template <class S>
Mat<S> absorb_query(const Mat<S>& q_nope, const Mat<S>& q_pe, const std::vector<Mat<S>>& kb) {
  // [H, nope], [H, rope] -> [H, kv_lora + rope]
  const int64_t H = q_nope.rows();
  if (static_cast<int64_t>(kb.size()) != H) throw std::invalid_argument("absorb_query: head count mismatch");
  Mat<S> qabs = absorb_query_rows<S>(one_row_query<S>(q_nope, q_pe), kb, q_nope.cols());
  return Eigen::Map<const Mat<S>>(qabs.data(), H, qabs.cols() / H);
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
  // The selected rows only (k and v expanded for those, not for the whole cache), then the rows form.
  const int64_t H = q_nope.rows();
  const std::vector<int32_t> sel = valid_indices(idx, n_idx, cache.rows());
  const int64_t K = static_cast<int64_t>(sel.size());
  Mat<S> G(K, cache.cols());  // gathered cache rows [K, kv_lora + rope]
  MatI local(1, K);           // their positions in G
  for (int64_t j = 0; j < K; ++j) {
    G.row(j) = cache.row(sel[j]);
    local(0, j) = static_cast<int32_t>(j);
  }
  Mat<S> o = sparse_mla_naive_rows<S>(one_row_query<S>(q_nope, q_pe), G, local, kb, vb, scale);  // [1, H*v]
  return Eigen::Map<const Mat<S>>(o.data(), H, o.cols() / H);
}

template <class S>
Mat<S> apply_v_up(const Mat<S>& o_lat, const std::vector<Mat<S>>& vb) {
  // o_lat [H, kv_lora] -> [H, v], as one row [1, H*kv_lora]
  const int64_t H = o_lat.rows();
  Mat<S> row = Eigen::Map<const Mat<S>>(o_lat.data(), 1, o_lat.size());
  Mat<S> o = apply_v_up_rows<S>(row, vb);
  return Eigen::Map<const Mat<S>>(o.data(), H, o.cols() / H);
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
  template Mat<S> mla_latent<S>(const Mat<S>&, const Vec<S>&, double, const int64_t*, const Eigen::VectorXd&);    \
  template Mat<S> absorb_query_rows<S>(const Mat<S>&, const std::vector<Mat<S>>&, int64_t);                      \
  template Mat<S> sparse_mla_absorbed_rows<S>(const Mat<S>&, const CRef<S>&, const MatI&, int64_t, double);      \
  template Mat<S> apply_v_up_rows<S>(const Mat<S>&, const std::vector<Mat<S>>&);                                 \
  template Mat<S> sparse_mla_naive_rows<S>(const Mat<S>&, const CRef<S>&, const MatI&, const std::vector<Mat<S>>&, \
                                           const std::vector<Mat<S>>&, double);                                  \
  template class RowCache<S>;
MLACONF_INSTANTIATE_MLA(float)
MLACONF_INSTANTIATE_MLA(double)

}  // namespace mlaconf::ref
