// mlaconf optimized: the per-row top-k of the indexer's scores (radix select): one CTA per row, or, for long rows,
// two launches over many CTAs (histograms, then the candidates of the k-th largest key's bin).
#include <cub/block/block_scan.cuh>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"
#include "optimized/faults.h"
#include "optimized/indexer_rows.cuh"
#include "optimized/mma.cuh"

namespace mlaconf::cuda {
using namespace idx;
namespace {


// One CTA (kTopkThreads threads) for a whole row. Radix select of the k-th largest key (4 passes of 8
// bits), then one ordered pass that keeps every key above it and the lowest-index (or, under the fault,
// highest-index) equal ones.
__device__ void topk_row_block(const float* row, int64_t L, int k, bool upper_tie, int32_t* orow) {
  using Scan = cub::BlockScan<int, kTopkThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int hist[256];
  __shared__ int s_valid, s_bucket, s_remaining, s_run_eq, s_run_take;
  const int tid = threadIdx.x;

  int nv = 0;
  for (int64_t i = tid; i < L; i += kTopkThreads) nv += isfinite(row[i]) ? 1 : 0;
  int total_valid = 0, unused = 0;
  Scan(scan_tmp).ExclusiveSum(nv, unused, total_valid);
  if (tid == 0) s_valid = total_valid;
  __syncthreads();
  const int keff = min(k, s_valid);
  uint32_t prefix = 0, mask = 0;
  int remaining = keff, eq_total = 0;
  if (keff > 0) {
    for (int pass = 0; pass < 4; ++pass) {
      const int shift = 24 - 8 * pass;
      for (int i = tid; i < 256; i += kTopkThreads) hist[i] = 0;
      __syncthreads();
      // Scores cluster in a few buckets (one sign and exponent), so the lanes of a warp that share a
      // bucket add once, together: without that, the first pass serialises on one shared counter.
      for (int64_t base = 0; base < L; base += kTopkThreads) {
        const int64_t i = base + tid;
        int bucket = -1;
        if (i < L) {
          const float f = row[i];
          const uint32_t key = order_key(f);
          if (isfinite(f) && (key & mask) == prefix) bucket = (int)((key >> shift) & 255);
        }
        const unsigned peers = __match_any_sync(0xffffffffu, bucket);
        if (bucket >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bucket], __popc(peers));
      }
      __syncthreads();
      if (tid == 0) {
        int cum = 0, b = 255;
        for (; b > 0; --b) {
          if (cum + hist[b] >= remaining) break;
          cum += hist[b];
        }
        s_bucket = b;
        s_remaining = remaining - cum;
      }
      __syncthreads();
      prefix |= (uint32_t)s_bucket << shift;
      mask |= 255u << shift;
      remaining = s_remaining;
      eq_total = hist[s_bucket];
      __syncthreads();
    }
  }
  // Ordered collection: ascending indices by construction.
  if (tid == 0) {
    s_run_eq = 0;
    s_run_take = 0;
  }
  __syncthreads();
  const int skip_eq = upper_tie ? eq_total - remaining : 0;  // equal keys to pass over before taking
  for (int64_t base = 0; base < L && keff > 0; base += kTopkThreads) {
    const int64_t i = base + tid;
    int gt = 0, eq = 0;
    if (i < L) {
      const float f = row[i];
      if (isfinite(f)) {
        const uint32_t key = order_key(f);
        gt = key > prefix;
        eq = key == prefix;
      }
    }
    int eq_rank, eq_sum;
    Scan(scan_tmp).ExclusiveSum(eq, eq_rank, eq_sum);
    __syncthreads();
    eq_rank += s_run_eq;
    const int take = gt || (eq && eq_rank >= skip_eq && eq_rank < skip_eq + remaining);
    int pos, take_sum;
    Scan(scan_tmp).ExclusiveSum(take, pos, take_sum);
    pos += s_run_take;
    if (take && pos < k) orow[pos] = (int32_t)i;
    __syncthreads();
    if (tid == 0) {
      s_run_eq += eq_sum;
      s_run_take += take_sum;
    }
    __syncthreads();
  }
  for (int i = keff + tid; i < k; i += kTopkThreads) orow[i] = -1;
}

__global__ void __launch_bounds__(kTopkThreads) topk_kernel(const float* scores, int64_t L, int k, bool upper_tie, int32_t* out) {
  topk_row_block(scores + (int64_t)blockIdx.x * L, L, k, upper_tie, out + (int64_t)blockIdx.x * k);
}

// ---- top-k of long rows over many CTAs ----------------------------------------------------------
// Two launches (grid: chunks x rows). topk_hist: per-CTA histograms of bits 31..21 of the order keys
// (sign, exponent, 2 mantissa bits), added into a global one; the last CTA of a row (ticket) finds the
// bin b1 that holds the k-th largest key and the count above it. topk_collect: every CTA marks the
// elements above bin b1 in a selection bitmap of the row and appends those in it to the row's candidate
// list in global memory (up to kTopkCand: a bin is a quarter octave, so the k-th largest key's bin holds
// a small share of a long row); the last CTA selects among the candidates (histograms of key bits
// 20..10, then 9..0, over the list in L2; then up to three over the index for the ties: lowest index
// first), marks them, and writes the row's bitmap out in index order (ascending, -1 padded). Where more
// than kTopkCand elements fall in bin b1 (heavy ties, or scores packed in a quarter octave), that CTA
// runs the one-CTA algorithm on the whole row instead. Every counter, histogram and bitmap is left zero
// for the next call.
constexpr int kTopkPer = kTopkChunk / kTopkThreads;  // elements per thread

// A CTA's chunk [beg, end) of a row, element tid + j * kTopkThreads in v[j] (NaN past the end: not finite).
// Every load is issued before any is used, so the chunk costs one memory latency, not kTopkPer.
__device__ __forceinline__ void load_chunk(const float* row, int64_t beg, int64_t end, float (&v)[kTopkPer]) {
#pragma unroll
  for (int j = 0; j < kTopkPer; ++j) {
    const int64_t i = beg + threadIdx.x + (int64_t)j * kTopkThreads;
    v[j] = i < end ? __ldg(row + i) : NAN;
  }
}

// Bits 31..21 of every finite key; the row's last CTA leaves b1, the count above it and keff in state.
__global__ void __launch_bounds__(kTopkThreads) topk_hist(const float* scores, int64_t L, int k, TopkWork w) {
  __shared__ int hist[kBins];
  __shared__ TkScan::TempStorage tmp;
  __shared__ int s_valid, s_last, s_bin, s_rest;
  const int tid = threadIdx.x;
  const int64_t t = blockIdx.y, beg = (int64_t)blockIdx.x * kTopkChunk, end = min(L, beg + kTopkChunk);
  const float* row = scores + t * L;
  if (tid == 0) s_valid = 0;
  zero_hist(hist);
  int nv = 0;
  float v[kTopkPer];
  load_chunk(row, beg, end, v);
#pragma unroll
  for (int j = 0; j < kTopkPer; ++j) {  // the same trip count in every thread: the warps stay converged
    int bucket = -1;
    if (isfinite(v[j])) {
      ++nv;
      bucket = (int)(order_key(v[j]) >> 21);
    }
    const unsigned peers = __match_any_sync(0xffffffffu, bucket);
    if (bucket >= 0 && (tid & 31) == __ffs(peers) - 1) atomicAdd(&hist[bucket], __popc(peers));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) nv += __shfl_xor_sync(0xffffffffu, nv, o);
  if ((tid & 31) == 0) atomicAdd(&s_valid, nv);
  __syncthreads();
  for (int b = tid; b < kBins; b += kTopkThreads)
    if (hist[b]) atomicAdd(&w.hist[t * kBins + b], hist[b]);
  if (tid == 0) atomicAdd(&w.valid[t], s_valid);
  if (!last_cta_of_row(&w.ticket1[t], s_last, tid)) return;
  for (int b = tid; b < kBins; b += kTopkThreads) {
    hist[b] = __ldcg(&w.hist[t * kBins + b]);
    w.hist[t * kBins + b] = 0;
  }
  const int keff = min(k, __ldcg(&w.valid[t]));
  __syncthreads();
  if (keff > 0) {
    find_bin(hist, keff, true, tmp, &s_bin, &s_rest);
  } else if (tid == 0) {
    s_bin = -1, s_rest = 0;
  }
  __syncthreads();
  if (tid == 0) publish_first_bin(w.state, w.valid, w.ticket1, t, s_bin, s_rest, keff);
}

// done (or nullptr): done[t * 8] != 0 when row t's selection is already written (indexer_refine's last CTA).
__global__ void __launch_bounds__(kTopkThreads) topk_collect(const float* scores, int64_t L, int k, TopkWork w, int32_t* out,
                                                             const int* done = nullptr) {
  __shared__ int hist[kBins];
  __shared__ TkScan::TempStorage tmp;
  __shared__ int s_last, s_bin, s_rest;
  const int tid = threadIdx.x;
  const int64_t t = blockIdx.y, beg = (int64_t)blockIdx.x * kTopkChunk, end = min(L, beg + kTopkChunk);
  if (done && done[t * 8]) return;
  const float* row = scores + t * L;
  uint32_t* bm = w.bitmap + t * w.words;
  const int b1 = w.state[t * 8 + 0], above = w.state[t * 8 + 1], keff = w.state[t * 8 + 2];
  if (b1 >= 0) {
    float v[kTopkPer];
    load_chunk(row, beg, end, v);
    int mine = 0;  // this thread's elements in bin b1
#pragma unroll
    for (int j = 0; j < kTopkPer; ++j) {
      const int64_t i = beg + tid + (int64_t)j * kTopkThreads;
      if (!isfinite(v[j])) continue;
      const int top = (int)(order_key(v[j]) >> 21);
      if (top > b1) atomicOr(&bm[i >> 5], 1u << (i & 31));  // no return value: nothing waits for it
      mine += top == b1;
    }
    // One list append per warp: an inclusive scan of the counts, the last lane's atomic for the warp.
    const int lane = tid & 31;
    int incl = mine;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += up;
    }
    int base = 0;
    if (lane == 31 && incl) base = atomicAdd(&w.ncand[t], incl);
    int pos = __shfl_sync(0xffffffffu, base, 31) + incl - mine;
#pragma unroll
    for (int j = 0; j < kTopkPer; ++j) {
      if (!isfinite(v[j])) continue;
      const uint32_t key = order_key(v[j]);
      if ((int)(key >> 21) == b1) {
        if (pos < kTopkCand) w.ckey[t * kTopkCand + pos] = key, w.cidx[t * kTopkCand + pos] = (int32_t)(beg + tid + (int64_t)j * kTopkThreads);
        ++pos;
      }
    }
  }
  if (!last_cta_of_row(&w.ticket2[t], s_last, tid)) return;
  const int n_cand = __ldcg(&w.ncand[t]);
  const uint32_t* ckey = w.ckey + t * kTopkCand;
  const int32_t* cidx = w.cidx + t * kTopkCand;
  int32_t* orow = out + t * k;
  if (keff > 0 && n_cand > kTopkCand) {  // too many in bin b1: the exact one-CTA algorithm over the whole row
    for (int64_t j = tid; j < w.words; j += kTopkThreads) bm[j] = 0;
    topk_row_block(row, L, k, false, orow);
  } else {
    select_listed<kTopkThreads>(ckey, cidx, n_cand, b1, above, keff, bm, w.words, k, orow, hist, tmp, &s_bin, &s_rest);
  }
  if (tid == 0) w.ncand[t] = 0, w.ticket2[t] = 0;
}
}  // namespace

namespace idx {

bool topk_multi(int64_t L, int64_t k) {
  return L >= kTopkMultiMinL && k <= kTopkCap && active_fault() != Fault::TopkUpperTie && L <= INT32_MAX;
}

// Zeroed work memory for the multi-CTA top-k, grown on demand (every call leaves it zero); one per
// device (the layer split runs stages on several devices).
TopkWork topk_work(int64_t T, int64_t L) {
  struct Work {
    DeviceBuffer buf;
    int64_t cap_T = 0, cap_words = 0;
  };
  static Work works[64];
  Work& wk = works[current_device() & 63];
  DeviceBuffer& buf = wk.buf;
  int64_t& cap_T = wk.cap_T;
  int64_t& cap_words = wk.cap_words;
  const int64_t words = (L + 31) / 32;
  if (T > cap_T || words > cap_words) {
    cap_T = std::max(T, cap_T), cap_words = std::max(words, cap_words);
    const size_t ints = (size_t)cap_T * (kBins + 4 + 8 + 2 * kTopkCand) + (size_t)cap_T * cap_words;
    buf = DeviceBuffer();
    buf = DeviceBuffer(ints * 4);
    buf.fill(0);
    bump_workspace_generation();
  }
  int* p = buf.as<int>();
  TopkWork w;
  w.hist = p, p += cap_T * kBins;
  w.valid = p, p += cap_T;
  w.ticket1 = p, p += cap_T;
  w.ticket2 = p, p += cap_T;
  w.ncand = p, p += cap_T;
  w.state = p, p += cap_T * 8;
  w.ckey = reinterpret_cast<uint32_t*>(p), p += cap_T * kTopkCand;
  w.cidx = p, p += cap_T * kTopkCand;
  w.bitmap = reinterpret_cast<uint32_t*>(p);
  w.words = words;
  return w;
}

void launch_topk_collect(const float* scores, int64_t T, int64_t L, int k, const TopkWork& w, int32_t* out, const int* done) {
  topk_collect<<<dim3(ceil_div(L, kTopkChunk), (unsigned)T), kTopkThreads, 0, cur_stream()>>>(scores, L, k, w, out, done);
  MLACONF_CUDA_LAUNCH_CHECK("topk_collect");
}

}  // namespace idx

void topk_rows(const float* d_scores, int64_t T, int64_t L, int64_t k, int32_t* d_out) {
  if (k <= 0 || k > INT32_MAX || L < 0) throw InputError("cuda::topk_rows: bad k or L");
  if (T == 0) return;
  const bool upper_tie = active_fault() == Fault::TopkUpperTie;
  if (topk_multi(L, k)) {
    for (int64_t t0 = 0; t0 < T; t0 += kTopkRowsPerPass) {
      const int64_t nt = std::min(kTopkRowsPerPass, T - t0);
      const TopkWork w = topk_work(nt, L);
      const dim3 grid(ceil_div(L, kTopkChunk), (unsigned)nt);
      topk_hist<<<grid, kTopkThreads, 0, cur_stream()>>>(d_scores + t0 * L, L, (int)k, w);
      MLACONF_CUDA_LAUNCH_CHECK("topk_hist");
      launch_topk_collect(d_scores + t0 * L, nt, L, (int)k, w, d_out + t0 * k);
    }
    return;
  }
  topk_kernel<<<(unsigned)T, kTopkThreads, 0, cur_stream()>>>(d_scores, L, (int)k, upper_tie, d_out);
  MLACONF_CUDA_LAUNCH_CHECK("topk_kernel");
}

}  // namespace mlaconf::cuda
