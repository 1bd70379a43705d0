// mlaconf reference: lazy dequantization of the model's weights (see weights.h).
#include "reference/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include "core/error.h"
#include "core/weight_layout.h"
#include "reference/dequant/dequant.h"
#include "reference/threads.h"

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

namespace {

// Gives the file pages of bytes [p, p + n) of the GGUF mapping back to the kernel once they have been
// dequantized. The mapping is read-only and private, so its pages are clean: MADV_DONTNEED only drops
// them from this process (they stay in the page cache, and a later read faults them in again with the
// same contents). Without it every byte read through the mapping stays resident, and counted in RSS,
// for the life of the mapping (~4 GB for one GLM-5 MoE layer). Best effort: errors are ignored.
void release_file_pages(const uint8_t* p, uint64_t n) {
  if (!p || n == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n + page - 1) & ~(page - 1);
  (void)madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

// Rows [row0, row0 + nrows) of t into dst (S = float or double), through a bounded float staging buffer
// for double, releasing the file pages of each chunk right after it is dequantized.
template <class S>
void dequant_range(const TensorInfo& t, int64_t row0, int64_t nrows, S* dst) {
  const int64_t ne0 = t.ne[0];
  int64_t rb = 0;  // known good once dequantize_rows has accepted the tensor
  // Chunks of ~4 Mi values: the file pages in use and the staging buffer stay small.
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(ne0, 1));
  if (nrows == 0) {  // still validates the tensor (type, row size) as a non-empty call would
    float none = 0;
    dequantize_rows(t, row0, 0, &none);
    return;
  }
  std::vector<float> tmp;
  if constexpr (!std::is_same_v<S, float>) tmp.resize(static_cast<size_t>(std::min(chunk, nrows) * ne0));
  for (int64_t r = 0; r < nrows; r += chunk) {
    const int64_t n = std::min(chunk, nrows - r);
    if constexpr (std::is_same_v<S, float>) {
      dequantize_rows(t, row0 + r, n, dst + r * ne0);
    } else {
      dequantize_rows(t, row0 + r, n, tmp.data());
      std::copy(tmp.begin(), tmp.begin() + n * ne0, dst + r * ne0);
    }
    if (rb == 0) rb = t.row_bytes();
    release_file_pages(t.data + (row0 + r) * rb, static_cast<uint64_t>(n * rb));
  }
}

}  // namespace

template <class S>
void Weights<S>::load_into(const TensorInfo& t, int64_t row0, int64_t nrows, S* dst) const {
  // Large ranges are split over the threads by rows (reference/threads.h); small ones (norms, single
  // embedding rows) are not worth a thread. Dequantization is exact per block, so any split of the rows
  // gives the same values. A bad tensor (a type that cannot be dequantized, rows past its bytes) throws in
  // every block; the first block's error is rethrown, the message a single-threaded call gives.
  constexpr int64_t kMinValuesPerThread = int64_t{1} << 20;
  const int64_t min_rows = std::max<int64_t>(1, kMinValuesPerThread / std::max<int64_t>(t.ne[0], 1));
  if (nrows == 0) return dequant_range<S>(t, row0, 0, dst);  // validates the tensor all the same
  for_row_blocks(nrows, min_rows, [&](int64_t b, int64_t e) { dequant_range<S>(t, row0 + b, e - b, dst + b * t.ne[0]); });
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
Mat<S> Weights<S>::linear_streamed(const std::string& name, const Mat<S>& x) {
  const TensorInfo& t = info(name, 2);
  const size_t as_s = sizeof(S) * static_cast<size_t>(t.ne[0]) * static_cast<size_t>(t.ne[1]);
  if (as_s <= kStreamAboveBytes || mats_.count(name)) return linear<S>(x, mat(name));
  const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(kStreamBlockBytes / (sizeof(S) * static_cast<size_t>(t.ne[0]))));
  return linear_blocked(name, x, rows);
}

template <class S>
Mat<S> Weights<S>::linear_blocked(const std::string& name, const Mat<S>& x, int64_t block_rows) {
  const TensorInfo& t = info(name, 2);
  if (x.cols() != t.ne[0])
    throw InputError(f_.path() + ": " + name + " " + t.shape_string() + " does not take inputs of width " +
                     std::to_string(x.cols()));
  if (block_rows < 1) throw std::invalid_argument("linear_blocked: block_rows < 1");
  const int64_t out = t.ne[1];
  Mat<S> y(x.rows(), out);
  Mat<S> block;
  for (int64_t r0 = 0; r0 < out; r0 += block_rows) {
    const int64_t n = std::min(block_rows, out - r0);
    block.resize(n, t.ne[0]);  // keeps the allocation while the size is unchanged
    load_into(t, r0, n, block.data());
    y.middleCols(r0, n) = linear<S>(x, block);
  }
  return y;
}

template <class S>
void Weights<S>::expert_tensors(int64_t layer, int64_t e, const TensorInfo* ts[3]) const {
  const char* suffixes[3] = {wname::kGateExps, wname::kUpExps, wname::kDownExps};
  for (int i = 0; i < 3; ++i) {
    ts[i] = &info(wname::blk(layer, suffixes[i]), 3);
    if (e < 0 || e >= ts[i]->ne[2])
      throw InputError(f_.path() + ": expert " + std::to_string(e) + " is outside " + ts[i]->name + " " +
                       ts[i]->shape_string());
  }
}

template <class S>
void Weights<S>::load_expert(const TensorInfo* const ts[3], int64_t e, ExpertWeights<S>& w) const {
  Mat<S>* dst[3] = {&w.gate, &w.up, &w.down};
  for (int i = 0; i < 3; ++i) {
    const TensorInfo& t = *ts[i];
    dst[i]->resize(t.ne[1], t.ne[0]);  // keeps the allocation when the size is unchanged
    load_into(t, e * t.ne[1], t.ne[1], dst[i]->data());  // expert e: rows [e*out, (e+1)*out) of [out*E, in]
  }
}

template <class S>
size_t Weights<S>::expert_bytes(int64_t layer) const {
  const TensorInfo* ts[3];
  expert_tensors(layer, 0, ts);
  size_t n = 0;
  for (const TensorInfo* t : ts) n += static_cast<size_t>(t->ne[0] * t->ne[1]);
  return sizeof(S) * n;
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
  const TensorInfo* ts[3];
  expert_tensors(layer, e, ts);
  const size_t nb = expert_bytes(layer);
  // Evict least recently used experts until the new one fits (the cache may then hold just it), before
  // dequantizing, so the budget is never exceeded by one expert. The last evicted expert's buffers are
  // reused for the new one when their shapes match (every expert of a model has the same shapes): a
  // fresh 50-MB allocation per matrix would be zero-filled by the kernel page by page, which costs more
  // system time than the dequantization itself.
  std::unique_ptr<ExpertWeights<S>> w;
  while (!lru_.empty() && expert_bytes_ + nb > budget_) {
    expert_bytes_ -= lru_.back().second->bytes();
    lru_index_.erase(lru_.back().first);
    w = std::move(lru_.back().second);
    lru_.pop_back();
  }
  if (!w) w = std::make_unique<ExpertWeights<S>>();
  load_expert(ts, e, *w);
  ++expert_loads_;
  lru_.emplace_front(key, std::move(w));
  lru_index_[key] = lru_.begin();
  expert_bytes_ += nb;
  return *lru_.front().second;
}

template <class S>
const ExpertWeights<S>& Weights<S>::expert_in_flight(int64_t layer, int64_t e, std::unique_ptr<ExpertWeights<S>>& spare) {
  const Key key{layer, e};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = lru_index_.find(key);
    if (it != lru_index_.end()) {
      ++expert_hits_;
      lru_.splice(lru_.begin(), lru_, it->second);  // moves no element: references stay valid
      return *lru_.front().second;
    }
  }
  const TensorInfo* ts[3];
  expert_tensors(layer, e, ts);
  const size_t nb = expert_bytes(layer);
  if (!spare) spare = std::make_unique<ExpertWeights<S>>();
  load_expert(ts, e, *spare);  // outside the lock: the dequantizations of the experts in flight overlap
  std::lock_guard<std::mutex> lock(mu_);
  ++expert_loads_;
  if (!lru_index_.count(key) && expert_bytes_ + nb <= budget_) {
    lru_.emplace_front(key, std::move(spare));
    lru_index_[key] = lru_.begin();
    expert_bytes_ += nb;
    return *lru_.front().second;
  }
  return *spare;
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
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (it->first.first == layer) {
      expert_bytes_ -= it->second->bytes();
      lru_index_.erase(it->first);
      it = lru_.erase(it);
    } else {
      ++it;
    }
  }
}

template class Weights<float>;
template class Weights<double>;

}  // namespace mlaconf::ref
