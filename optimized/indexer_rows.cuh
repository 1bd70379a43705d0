// mlaconf optimized: what the indexer's three files share (indexer_scores.cu: the scores kernels, with the multi-CTA
// top-k's first pass fused into the fp32 one; indexer_topk.cu: the per-row top-k; indexer_select.cu: the decode
// selection by bounds and refined scores): the order keys and the first histogram of a row, the multi-CTA
// top-k's work memory and its selection from a list of candidates, and the launch of its collecting pass.
#pragma once
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include <cstdint>

#include "optimized/common.cuh"

namespace mlaconf::cuda::idx {

// Order-preserving unsigned key of a float (larger float, larger key; -0 < +0).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
constexpr int kBins = 2048;  // the multi-CTA top-k's first histogram: bits 31..21 of the order keys

// The row's CTAs each take a ticket after their global writes: true, in every thread, for the row's last
// CTA, which then sees every other CTA's writes (a fence before the ticket and one after). Begins and ends
// with a barrier; s_last: a shared int of the kernel; tid: threadIdx.x.
__device__ __forceinline__ bool last_cta_of_row(int* ticket, int& s_last, int tid) {
  __threadfence();
  __syncthreads();
  if (tid == 0) s_last = atomicAdd(ticket, 1) == (int)gridDim.x - 1;
  __syncthreads();
  if (!s_last) return false;
  __threadfence();
  return true;
}

// The multi-CTA top-k's first pass, fused into the scores kernel (indexer_topk_f32_rows): its
// per-row global histogram, count of finite scores, ticket and state (the TopkWork of topk_rows).
// hist == nullptr: the scores kernel leaves it alone.
struct ScoreHist {
  int* hist = nullptr;  // [T][kBins]
  int* valid = nullptr;  // [T]
  int* ticket = nullptr;  // [T]
  int* state = nullptr;  // [T][8]: b1, count above bin b1, keff
  int k = 0;
};

// One thread of row t's last CTA: the row's first-bin pick (the bin b1, the count above it, keff) into state
// for topk_collect, and the row's count and ticket left zero for the next call.
__device__ __forceinline__ void publish_first_bin(int* state, int* valid, int* ticket, int64_t t, int bin, int rest, int keff) {
  state[t * 8 + 0] = bin;
  state[t * 8 + 1] = keff - rest;
  state[t * 8 + 2] = keff;
  valid[t] = 0;
  ticket[t] = 0;
}

// Run by the last CTA of row t (NT threads), after every CTA of the row added its scores to h: the bin
// b1 of bits 31..21 that holds the k-th largest finite score, the count above it and keff = min(k,
// finite count) into h.state (what topk_hist leaves for topk_collect); the row's histogram, count and
// ticket left zero.
template <int NT>
__device__ void pick_first_bin(const ScoreHist& h, int64_t t) {
  using Scan = cub::BlockScan<int, NT>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int s_bin, s_rest;
  constexpr int per = kBins / NT;
  const int tid = threadIdx.x;
  int v[per], sum = 0;
#pragma unroll
  for (int j = 0; j < per; ++j) {  // thread tid: bins in descending order, positions per * tid + j
    int* cell = &h.hist[t * kBins + kBins - 1 - (per * tid + j)];
    v[j] = __ldcg(cell);
    *cell = 0;
    sum += v[j];
  }
  int ex, total;
  Scan(tmp).ExclusiveSum(sum, ex, total);
  const int keff = min(h.k, __ldcg(&h.valid[t]));
  if (tid == 0) s_bin = -1, s_rest = 0;
  __syncthreads();
  if (keff > 0 && ex < keff && keff <= ex + sum) {
    int c = ex;
#pragma unroll
    for (int j = 0; j < per; ++j) {
      if (c < keff && keff <= c + v[j]) s_bin = kBins - 1 - (per * tid + j), s_rest = keff - c;
      c += v[j];
    }
  }
  __syncthreads();
  if (tid == 0) publish_first_bin(h.state, h.valid, h.ticket, t, s_bin, s_rest, keff);
}

// A lane's share of sum_h w[h] relu(S[key, h]) from the C fragments of NT n-tiles of 8 heads: its heads
// 8n + 2t and 8n + 2t + 1 (weights wv[n][0..1]) for its keys g (tA) and g + 8 (tB), n ascending.
template <int NT>
__device__ __forceinline__ void relu_weighted(const float (&acc)[NT][4], const float (&wv)[NT][2], float& tA, float& tB) {
  tA = 0.f;
  tB = 0.f;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    tA = fmaf(wv[n][0], fmaxf(acc[n][0], 0.f), tA);
    tA = fmaf(wv[n][1], fmaxf(acc[n][1], 0.f), tA);
    tB = fmaf(wv[n][0], fmaxf(acc[n][2], 0.f), tB);
    tB = fmaf(wv[n][1], fmaxf(acc[n][3], 0.f), tB);
  }
}

constexpr int kTopkThreads = 1024;
// The multi-CTA top-k (indexer_topk.cu has its algorithm).
constexpr int kTopkCap = 3072;          // largest k of the multi-CTA path
constexpr int kTopkCand = 16384;        // candidates per row (bin b1's elements)
constexpr int kTopkChunk = 8192;        // elements per CTA
constexpr int64_t kTopkMultiMinL = 16384;

// Rows that take the multi-CTA top-k (the fault's tie rule lives in the one-CTA kernel only). It runs
// kTopkRowsPerPass rows at a time, so that its work memory (about 140 KB per row) stays bounded for a
// long prefill.
constexpr int64_t kTopkRowsPerPass = 512;

struct TopkWork {
  int* hist;         // [T][kBins]
  int* valid;        // [T]
  int* ticket1;      // [T]
  int* ticket2;      // [T]
  int* ncand;        // [T]
  int* state;        // [T][8]: b1, count above bin b1, keff
  uint32_t* ckey;    // [T][kTopkCand]
  int32_t* cidx;     // [T][kTopkCand]
  uint32_t* bitmap;  // [T][words]
  int64_t words;
};
using TkScan = cub::BlockScan<int, kTopkThreads>;

// hist[kBins] (shared, complete) in scan order (bins descending when desc, else ascending): the bin
// where the running count reaches need (1-based) -> *s_bin, and need minus the count before it -> *s_rest.
// NT threads; tmp: a BlockScan<int, NT>'s storage.
template <int NT = kTopkThreads>
__device__ void find_bin(const int* hist, int need, bool desc, typename cub::BlockScan<int, NT>::TempStorage& tmp, int* s_bin,
                         int* s_rest) {
  constexpr int per = kBins / NT;
  int v[per], ex[per], bin[per], total;
#pragma unroll
  for (int j = 0; j < per; ++j) {
    const int pos = per * threadIdx.x + j;
    bin[j] = desc ? kBins - 1 - pos : pos;
    v[j] = hist[bin[j]];
  }
  cub::BlockScan<int, NT>(tmp).ExclusiveSum(v, ex, total);
  if (threadIdx.x == 0 && total < need) *s_bin = -1, *s_rest = 0;
#pragma unroll
  for (int j = 0; j < per; ++j)
    if (ex[j] < need && need <= ex[j] + v[j]) *s_bin = bin[j], *s_rest = need - ex[j];
  __syncthreads();
}

template <int NT = kTopkThreads>
__device__ __forceinline__ void zero_hist(int* hist) {
  for (int b = threadIdx.x; b < kBins; b += NT) hist[b] = 0;
  __syncthreads();
}

// The selection of a row from a list of its keys (ckey / cidx, n_cand of them; NT threads, the row's last
// CTA): every listed key above bin b1 is selected, and of those in it (bits 31..21 == b1) the keff - above
// largest, ties to the lower index (histograms of key bits 20..10, then 9..0, then up to three over the
// index); listed keys below bin b1 are not. Marks the selection in the row's bitmap bm (which may already
// hold marks: keys above bin b1 that were not listed), writes it in index order into orow (ascending, -1
// padded to k) and leaves bm zero. hist: kBins ints of shared memory; tmp: a BlockScan<int, NT>'s storage;
// s_bin, s_rest: shared ints.
template <int NT>
__device__ void select_listed(const uint32_t* ckey, const int32_t* cidx, int n_cand, int b1, int above, int keff, uint32_t* bm,
                              int64_t words, int k, int32_t* orow, int* hist, typename cub::BlockScan<int, NT>::TempStorage& tmp,
                              int* s_bin, int* s_rest) {
  constexpr int kRegs = 4 * kTopkThreads / NT;   // list entries per thread kept in registers
  constexpr int kWords = 8 * kTopkThreads / NT;  // bitmap words per thread kept in registers
  const int tid = threadIdx.x;
  if (keff > 0) {
    // The list's first kRegs * NT entries stay in registers for all the passes below
    // (one L2 latency for them all); the rest, if any, are read from L2 once per pass.
    uint32_t rk[kRegs];
    int32_t ri[kRegs];
#pragma unroll
    for (int r = 0; r < kRegs; ++r) {
      const int j = tid + r * NT;
      rk[r] = j < n_cand ? __ldcg(&ckey[j]) : 0u;
      ri[r] = j < n_cand ? __ldcg(&cidx[j]) : 0;
    }
    auto each = [&](auto&& f) {  // f(key, index) for each of this thread's candidates
#pragma unroll
      for (int r = 0; r < kRegs; ++r)
        if (tid + r * NT < n_cand) f(rk[r], ri[r]);
      for (int j = tid + kRegs * NT; j < n_cand; j += NT) f(__ldcg(&ckey[j]), __ldcg(&cidx[j]));
    };
    // The need = keff - above largest of those in bin b1: key bits 20..10, then 9..0.
    uint32_t kstar = (uint32_t)b1 << 21;
    int rest = keff - above;
    for (int pass = 0; pass < 2; ++pass) {
      const int shift = pass == 0 ? 10 : 0;
      const uint32_t bits = pass == 0 ? 2047u : 1023u;
      zero_hist<NT>(hist);  // its barrier: everyone is done with the previous pass's histogram and s_bin
      each([&](uint32_t key, int32_t) {
        if ((key >> 21) == (uint32_t)b1 && (pass == 0 || (key >> 10) == (kstar >> 10))) atomicAdd(&hist[(key >> shift) & bits], 1);
      });
      __syncthreads();
      find_bin<NT>(hist, rest, true, tmp, s_bin, s_rest);
      kstar |= (uint32_t)*s_bin << shift;
      rest = *s_rest;
    }
    const int take_eq = rest, n_eq = hist[kstar & 1023u];
    __syncthreads();  // everyone has read hist before it changes
    // Ties at kstar: the take_eq lowest indices (indices < 2^31: 11 + 10 + 10 bits).
    int32_t cut = INT32_MAX;
    if (take_eq < n_eq) {
      uint32_t pre = 0;
      int left = take_eq;
      for (int pass = 0; pass < 3; ++pass) {
        const int shift = pass == 0 ? 20 : (pass == 1 ? 10 : 0);
        const uint32_t bits = pass == 0 ? 2047u : 1023u;
        const int hi_shift = pass == 1 ? 20 : 10;  // the index bits above this pass must equal pre
        zero_hist<NT>(hist);
        each([&](uint32_t key, int32_t i) {
          const uint32_t ix = (uint32_t)i;
          if (key == kstar && (pass == 0 || (ix >> hi_shift) == pre)) atomicAdd(&hist[(ix >> shift) & bits], 1);
        });
        __syncthreads();
        find_bin<NT>(hist, left, false, tmp, s_bin, s_rest);
        pre = (pre << (pass == 0 ? 11 : 10)) | (uint32_t)*s_bin;
        left = *s_rest;
      }
      cut = (int32_t)pre;
    }
    each([&](uint32_t key, int32_t ix) {
      if (key > kstar || (key == kstar && ix <= cut)) atomicOr(&bm[ix >> 5], 1u << (ix & 31));
    });
  }
  __syncthreads();
  // The bitmap in index order: each thread a run of words, positions by a block scan of the counts.
  // Runs of up to kWords words (L <= kWords * 32 * NT) are read once, into registers.
  const int64_t per = (words + NT - 1) / NT;
  const int64_t w0 = tid * per, w1 = min(words, w0 + per);
  uint32_t rw[kWords];
  int cnt = 0;
  if (per <= kWords) {
#pragma unroll
    for (int r = 0; r < kWords; ++r) rw[r] = w0 + r < w1 ? __ldcg(&bm[w0 + r]) : 0u;
#pragma unroll
    for (int r = 0; r < kWords; ++r) cnt += __popc(rw[r]);
  } else {
    for (int64_t j = w0; j < w1; ++j) cnt += __popc(__ldcg(&bm[j]));
  }
  int pos, total;
  cub::BlockScan<int, NT>(tmp).ExclusiveSum(cnt, pos, total);
  auto emit = [&](int64_t j, uint32_t m) {  // word j's set bits, ascending; the word left zero
    if (!m) return;
    bm[j] = 0;
    while (m) {
      const int b = __ffs(m) - 1;
      m &= m - 1;
      if (pos < k) orow[pos] = (int32_t)(j * 32 + b);
      ++pos;
    }
  };
  if (per <= kWords) {
#pragma unroll
    for (int r = 0; r < kWords; ++r) emit(w0 + r, rw[r]);
  } else {
    for (int64_t j = w0; j < w1; ++j) emit(j, __ldcg(&bm[j]));
  }
  for (int j = total + tid; j < k; j += NT) orow[j] = -1;
}

// Whether a row of L scores takes the multi-CTA top-k for this k (else the one-CTA kernel).
bool topk_multi(int64_t L, int64_t k);
// Zeroed work memory for the multi-CTA top-k of T rows of L (grown on demand; every call leaves it zero).
TopkWork topk_work(int64_t T, int64_t L);
// The multi-CTA top-k's second launch over T rows (topk_collect): scores [T][L], out [T][k]; done (or null): rows
// whose selection is already written (state[t * 8] != 0) return at once.
void launch_topk_collect(const float* scores, int64_t T, int64_t L, int k, const TopkWork& w, int32_t* out,
                         const int* done = nullptr);

}  // namespace mlaconf::cuda::idx
