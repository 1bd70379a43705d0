// mlaconf reference: lazy dequantization of the model's weights (see weights.h).
#include "reference/weights.h"

#include <algorithm>

#include "core/error.h"
#include "core/weight_layout.h"
#include "reference/dequant/dequant.h"

namespace mlaconf::ref {

template <class S>
Weights<S>::Weights(const GgufFile& f, const ModelConfig& c, size_t expert_cache_bytes)
    : f_(f), c_(c), budget_(expert_cache_bytes) {}

template <class S>
const TensorInfo& Weights<S>::info(const std::string& name, int n_dims) const {
  const TensorInfo& t = f_.tensor(name);  // throws InputError naming the tensor and the file
  // Trailing dims of 1 are allowed (a 2-D tensor may be written with n_dims 3 and ne2 = 1).
  for (int d = n_dims; d < 4; ++d)
    if (t.ne[d] != 1)
      throw InputError(f_.path() + ": tensor " + name + " has shape " + t.shape_string() + ", expected " +
                       std::to_string(n_dims) + " dimensions");
  return t;
}

template <class S>
void Weights<S>::load_into(const TensorInfo& t, int64_t row0, int64_t nrows, S* dst) const {
  const int64_t ne0 = t.ne[0];
  if constexpr (std::is_same_v<S, float>) {
    dequantize_rows(t, row0, nrows, dst);
  } else {
    const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(ne0, 1));  // ~16 MB of floats
    std::vector<float> tmp(static_cast<size_t>(std::min(chunk, nrows) * ne0));
    for (int64_t r = 0; r < nrows; r += chunk) {
      const int64_t n = std::min(chunk, nrows - r);
      dequantize_rows(t, row0 + r, n, tmp.data());
      std::copy(tmp.begin(), tmp.begin() + n * ne0, dst + r * ne0);
    }
  }
}

template <class S>
const Vec<S>& Weights<S>::vec(const std::string& name) {
  auto it = vecs_.find(name);
  if (it != vecs_.end()) return it->second;
  const TensorInfo& t = info(name, 1);
  Vec<S> out(t.ne[0]);
  load_into(t, 0, 1, out.data());
  dense_bytes_ += sizeof(S) * static_cast<size_t>(out.size());
  return vecs_.emplace(name, std::move(out)).first->second;
}

template <class S>
const Mat<S>& Weights<S>::mat(const std::string& name) {
  auto it = mats_.find(name);
  if (it != mats_.end()) return it->second;
  const TensorInfo& t = info(name, 2);
  // {in, out}: ne0 = in is the fastest dimension, so the rows of the row-major [out, in] matrix.
  Mat<S> m(t.ne[1], t.ne[0]);
  load_into(t, 0, t.ne[1], m.data());
  dense_bytes_ += sizeof(S) * static_cast<size_t>(m.size());
  return mats_.emplace(name, std::move(m)).first->second;
}

template <class S>
const std::vector<Mat<S>>& Weights<S>::per_head(const std::string& name) {
  auto it = heads_.find(name);
  if (it != heads_.end()) return it->second;
  const TensorInfo& t = info(name, 3);
  std::vector<Mat<S>> hs;
  for (int64_t h = 0; h < t.ne[2]; ++h) {
    Mat<S> m(t.ne[1], t.ne[0]);  // [ne1, ne0]
    load_into(t, h * t.ne[1], t.ne[1], m.data());
    dense_bytes_ += sizeof(S) * static_cast<size_t>(m.size());
    hs.push_back(std::move(m));
  }
  return heads_.emplace(name, std::move(hs)).first->second;
}

template <class S>
Mat<S> Weights<S>::embed_rows(const int32_t* ids, int64_t n) {
  const TensorInfo& t = info(wname::kTokenEmbd, 2);
  Mat<S> out(n, t.ne[0]);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= t.ne[1])
      throw InputError(f_.path() + ": token id " + std::to_string(ids[i]) + " is outside the vocabulary (" +
                       std::to_string(t.ne[1]) + " rows in " + wname::kTokenEmbd + ")");
    load_into(t, ids[i], 1, out.row(i).data());
  }
  return out;
}

template <class S>
const ExpertWeights<S>& Weights<S>::expert(int64_t layer, int64_t e) {
  const Key key{layer, e};
  auto it = lru_index_.find(key);
  if (it != lru_index_.end()) {
    ++expert_hits_;
    lru_.splice(lru_.begin(), lru_, it->second);  // most recently used to the front
    return *lru_.front().second;
  }
  auto one = [&](const char* suffix) {
    const TensorInfo& t = info(wname::blk(layer, suffix), 3);
    if (e < 0 || e >= t.ne[2])
      throw InputError(f_.path() + ": expert " + std::to_string(e) + " is outside " + t.name + " " + t.shape_string());
    Mat<S> m(t.ne[1], t.ne[0]);
    load_into(t, e * t.ne[1], t.ne[1], m.data());  // expert e: rows [e*out, (e+1)*out) of [out*E, in]
    return m;
  };
  auto w = std::make_unique<ExpertWeights<S>>();
  w->gate = one(wname::kGateExps);
  w->up = one(wname::kUpExps);
  w->down = one(wname::kDownExps);
  const size_t nb = w->bytes();
  ++expert_loads_;
  // Evict least recently used experts until the new one fits (the cache may still hold just it).
  while (!lru_.empty() && expert_bytes_ + nb > budget_) {
    expert_bytes_ -= lru_.back().second->bytes();
    lru_index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(key, std::move(w));
  lru_index_[key] = lru_.begin();
  expert_bytes_ += nb;
  return *lru_.front().second;
}

template <class S>
void Weights<S>::release_layer(int64_t layer) {
  const std::string prefix = "blk." + std::to_string(layer) + ".";
  auto drop = [&](auto& m, auto bytes_of) {
    for (auto it = m.begin(); it != m.end();) {
      if (it->first.rfind(prefix, 0) == 0) {
        dense_bytes_ -= bytes_of(it->second);
        it = m.erase(it);
      } else {
        ++it;
      }
    }
  };
  drop(vecs_, [](const Vec<S>& v) { return sizeof(S) * static_cast<size_t>(v.size()); });
  drop(mats_, [](const Mat<S>& v) { return sizeof(S) * static_cast<size_t>(v.size()); });
  drop(heads_, [](const std::vector<Mat<S>>& v) {
    size_t n = 0;
    for (auto& m : v) n += sizeof(S) * static_cast<size_t>(m.size());
    return n;
  });
}

template class Weights<float>;
template class Weights<double>;

}  // namespace mlaconf::ref
