// mlaconf optimized: the indexer's decode selection (indexer_select_f32_rows): tensor-core bounds on every key, then
// the fp32 scores, bit for bit, only where a bound reaches the top-k's threshold; the same selections as scoring
// every key (indexer_topk_f32_rows).
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

// ---- the decode selection: tensor-core bounds, then exact scores where they can decide --------------
// indexer_select_f32_rows gives the selections of indexer_topk_f32_rows, index for index, in two
// launches (Di = 128, Hi = 32 or 64):
//  1. indexer_bounds_mma: q and the keys (fp32) rounded to fp16 on the fly, S = k . q on the tensor
//     cores (fp32 accumulate), a = sum_h w_h relu(S_h), and a bound e >= |a - s|, where s is the score
//     the fp32 kernel computes (its rounding included). hi = a + e (rounded up) into work memory, and the
//     multi-CTA top-k's first histogram over lo = a - e (rounded down; per CTA in shared memory, then
//     added to the row's): bin b of the k-th largest lo.
//  2. indexer_refine (1024 or 256 keys per CTA, by shape: kRefineKeysSmall): every key with hi >= lambda, the lowest value of bin b, gets s
//     itself (the fp32 kernel's arithmetic, bit for bit) into the scores buffer and the row's list of
//     refined scores; every other key -inf. A key left out has s <= hi < lambda <= the k-th largest lo,
//     below the k keys whose lo is at least that: the exact rule would not select it either, and every key
//     it would select keeps its exact score. (Fewer than k finite lo: every key is refined.) The row's
//     last CTA picks the first bin of the refined scores and selects from the list as topk_collect's last
//     CTA does (select_listed): the fp32 path's selection, ties to the lower index included.
//  3. topk_collect, for a row whose list overflowed (more than kTopkCand refined keys) only: the others
//     return at once.
// The bound (per key, with the row's constants Qn = sum_h |w_h| |q_h|_2, Qa = sum_h |w_h| |q_h|_1,
// Wa = sum_h |w_h|):  e = kBoundRel |k|_2 Qn + kBoundAbs (|k|_1 Wa + Qa) + Wa 2^-40.
//  - fp16 rounding (round to nearest) moves each factor by at most 2^-11 of itself plus 2^-25 (half the
//    subnormal step), so a product by at most (2^-10 + 2^-22) |q_i k_i| + 1.001 2^-25 (|q_i| + |k_i|)
//    + 2^-50; summed over i, with sum |q_i k_i| <= |q|_2 |k|_2 (Cauchy-Schwarz).
//  - the tensor cores' fp32 accumulation: assumed to behave as published measurements of earlier tensor
//    cores do (products exact, each k-step's terms aligned to the largest and added with truncation): at
//    most 2^-16 sum |products| over 8 k-steps of 16 (17 ulps of the largest term per step); allowed 2^-15.
//  - the fp32 kernel's own chain of 128 fmaf: at most 128 2^-24 = 2^-17 sum |q_i k_i|; both weighted
//    sums over at most 64 heads: 2 x 2^-18 sum_h |w_h| |S_h|; relu is 1-Lipschitz.
//  Together 1.047 x 2^-10 relative; kBoundRel = 1.125 x 2^-10 leaves 7 % for the norms' own rounding.
// A key whose |k|_1, or a row whose |q_h|_1, reaches 65504 (fp16 overflow), or whose bound is not finite,
// is always refined (lo = -inf, hi = +inf). Under the fault indexer-no-bound, e = 0.
constexpr float kBoundRel = 1.125f / 1024.f;
constexpr float kBoundAbs = 1.01f / 33554432.f;  // 2^-25
constexpr float kHalfMax = 65504.f;
constexpr int kBoundWarps = 8;
// Keys per refine CTA, by shape: 256 (one per thread) where the rows' CTAs would not fill the GPU twice over
// with 1024 (B = 1: many CTAs, each refining few keys), else 1024 (H200, docs/perf/h200-2026-12-02.md: B = 1 at 32K 58.3 ->
// 46.9 us with 256; B = 16 at 128K 484 -> 592 us).
constexpr int kRefineKeysSmall = 256, kRefineKeysLarge = 1024;
constexpr int kRefineWarps = 8;
constexpr int kRefineGroup = 4;     // candidates per warp at once (independent fmaf chains)
constexpr int kRefinePitch = 129;   // q's row pitch in floats: lane h reads bank (h + d) % 32

// The row constants of the bound, for Hi heads of Di = 128 (computed by every CTA of the row the same
// way: thread 0 sums the heads in order).
struct BoundRow {
  float qn, qa, wa;
  bool ok;
};

template <int NT>
__global__ void __launch_bounds__(kBoundWarps * 32, 2)
    indexer_bounds_mma(const float* __restrict__ q, const float* __restrict__ k, const int64_t* __restrict__ k_off,
                       const float* __restrict__ w, const int32_t* __restrict__ q_pos, int64_t L, float* __restrict__ hi,
                       ScoreHist hs, bool no_bound) {
  constexpr int Di = 128, Hi = 8 * NT;
  __shared__ uint2 qf[NT][8][32];  // B fragments (n-tile, k-step, lane): q rounded to fp16
  __shared__ float w_s[Hi], ss_s[Hi], l1_s[Hi];
  __shared__ BoundRow row_s;
  __shared__ int hist[kBins];  // this CTA's share of the first histogram (lo clusters in a few bins: one
                               // global add per CTA and bin instead of one per warp, tile and bin)
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int64_t t = blockIdx.y;
  if (k_off) k += k_off[t];
  const int64_t last = min((int64_t)q_pos[t], L - 1);
  // The k dimension is permuted so that each load is a 16-byte run: k-step s = 2c + h of lane tq takes
  // dims 32c + 16h + 4tq .. +3 (A and B alike; a dot product does not care about the order of terms).
  // All of q's loads are issued before any is used (one L2 latency for the staging, not one per loop trip).
  constexpr int kQPer = NT * 256 / (kBoundWarps * 32);  // fragment entries per thread
  float4 qv[kQPer];
#pragma unroll
  for (int j = 0; j < kQPer; ++j) {
    const int e = tid + j * kBoundWarps * 32, n = e / 256, s = (e / 32) % 8, l = e % 32;
    qv[j] = __ldg(reinterpret_cast<const float4*>(q + (t * Hi + n * 8 + (l >> 2)) * Di + 16 * s + 4 * (l & 3)));
  }
  constexpr int kHeadsPerWarp = Hi / kBoundWarps;
  float4 hv[kHeadsPerWarp];
  float wh[kHeadsPerWarp];
#pragma unroll
  for (int j = 0; j < kHeadsPerWarp; ++j) {
    const int h = warp + j * kBoundWarps;
    hv[j] = __ldg(reinterpret_cast<const float4*>(q + (t * Hi + h) * Di + 4 * lane));
    wh[j] = __ldg(w + t * Hi + h);
  }
#pragma unroll
  for (int j = 0; j < kQPer; ++j) {
    const int e = tid + j * kBoundWarps * 32;
    qf[e / 256][(e / 32) % 8][e % 32] = make_uint2(pack_half2(qv[j].x, qv[j].y), pack_half2(qv[j].z, qv[j].w));
  }
  for (int i = tid; i < kBins; i += kBoundWarps * 32) hist[i] = 0;
#pragma unroll
  for (int j = 0; j < kHeadsPerWarp; ++j) {  // |q_h|_2^2 and |q_h|_1, a warp per head
    const float4 v = hv[j];
    float ss = v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w, l1 = fabsf(v.x) + fabsf(v.y) + fabsf(v.z) + fabsf(v.w);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o), l1 += __shfl_xor_sync(0xffffffffu, l1, o);
    const int h = warp + j * kBoundWarps;
    if (lane == 0) ss_s[h] = ss, l1_s[h] = l1, w_s[h] = wh[j];
  }
  __syncthreads();
  if (tid == 0) {
    BoundRow r{0.f, 0.f, 0.f, true};
    for (int h = 0; h < Hi; ++h) {
      const float aw = fabsf(w_s[h]);
      r.qn += aw * sqrtf(ss_s[h]);
      r.qa += aw * l1_s[h];
      r.wa += aw;
      r.ok = r.ok && l1_s[h] < kHalfMax;
    }
    r.ok = r.ok && isfinite(r.qn) && isfinite(r.qa) && isfinite(r.wa);
    row_s = r;
  }
  __syncthreads();
  const BoundRow br = row_s;
  float wv[NT][2];
#pragma unroll
  for (int n = 0; n < NT; ++n) wv[n][0] = w_s[n * 8 + 2 * tq], wv[n][1] = w_s[n * 8 + 2 * tq + 1];
  const bool aligned16 = (reinterpret_cast<uintptr_t>(k) & 15) == 0;

  int n_finite = 0;
  const int64_t n_tiles = (L + 15) / 16;
  const int64_t warps = (int64_t)gridDim.x * kBoundWarps;
  for (int64_t tile = (int64_t)blockIdx.x * kBoundWarps + warp; tile < n_tiles; tile += warps) {
    const int64_t key0 = tile * 16, kA = key0 + g, kB = kA + 8;
    float loA = -INFINITY, loB = -INFINITY, hiA = -INFINITY, hiB = -INFINITY;
    if (key0 <= last) {  // else the whole tile is in the future
      const float* ra = k + min(kA, last) * Di + 4 * tq;
      const float* rb = k + min(kB, last) * Di + 4 * tq;
      float4 fa[8], fb[8];  // k-step s: dims 16 s + 4 tq .. +3
      if (aligned16) {
#pragma unroll
        for (int s = 0; s < 8; ++s) fa[s] = __ldg(reinterpret_cast<const float4*>(ra + 16 * s)), fb[s] = __ldg(reinterpret_cast<const float4*>(rb + 16 * s));
      } else {
#pragma unroll
        for (int s = 0; s < 8; ++s)
          fa[s] = make_float4(ra[16 * s], ra[16 * s + 1], ra[16 * s + 2], ra[16 * s + 3]),
          fb[s] = make_float4(rb[16 * s], rb[16 * s + 1], rb[16 * s + 2], rb[16 * s + 3]);
      }
      float acc[NT][4];
#pragma unroll
      for (int n = 0; n < NT; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
      float ssA = 0.f, ssB = 0.f, l1A = 0.f, l1B = 0.f;
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        const float4 x = fa[s], y = fb[s];
        const uint32_t a[4] = {pack_half2(x.x, x.y), pack_half2(y.x, y.y), pack_half2(x.z, x.w), pack_half2(y.z, y.w)};
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          const uint2 b = qf[n][s][lane];
          mma_16816(acc[n], a, b.x, b.y);
        }
        ssA = fmaf(x.x, x.x, fmaf(x.y, x.y, fmaf(x.z, x.z, fmaf(x.w, x.w, ssA))));
        ssB = fmaf(y.x, y.x, fmaf(y.y, y.y, fmaf(y.z, y.z, fmaf(y.w, y.w, ssB))));
        l1A += fabsf(x.x) + fabsf(x.y) + fabsf(x.z) + fabsf(x.w);
        l1B += fabsf(y.x) + fabsf(y.y) + fabsf(y.z) + fabsf(y.w);
      }
      float tA, tB;
      relu_weighted<NT>(acc, wv, tA, tB);
#pragma unroll
      for (int o = 1; o < 4; o <<= 1) {
        tA += __shfl_xor_sync(0xffffffffu, tA, o), tB += __shfl_xor_sync(0xffffffffu, tB, o);
        ssA += __shfl_xor_sync(0xffffffffu, ssA, o), ssB += __shfl_xor_sync(0xffffffffu, ssB, o);
        l1A += __shfl_xor_sync(0xffffffffu, l1A, o), l1B += __shfl_xor_sync(0xffffffffu, l1B, o);
      }
      auto bounds = [&](float a, float ss, float l1, float& l, float& h) {
        const float e = no_bound ? 0.f : kBoundRel * sqrtf(ss) * br.qn + kBoundAbs * (l1 * br.wa + br.qa) + br.wa * 0x1p-40f;
        if (br.ok && l1 < kHalfMax && isfinite(a) && isfinite(e)) {
          l = __fsub_rd(a, e), h = __fadd_ru(a, e);
        } else {
          l = -INFINITY, h = INFINITY;  // always refined
        }
      };
      if (kA <= last) bounds(tA, ssA, l1A, loA, hiA);
      if (kB <= last) bounds(tB, ssB, l1B, loB, hiB);
    }
    if (tq == 0) {
      if (kA < L) hi[t * L + kA] = hiA;
      if (kB < L) hi[t * L + kB] = hiB;
    }
    if (tq == 0) {  // the first histogram of the finite lo
      if (isfinite(loA)) atomicAdd(&hist[order_key(loA) >> 21], 1), ++n_finite;
      if (isfinite(loB)) atomicAdd(&hist[order_key(loB) >> 21], 1), ++n_finite;
    }
  }
  __shared__ int s_last;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) n_finite += __shfl_xor_sync(0xffffffffu, n_finite, o);
  if (lane == 0 && n_finite) atomicAdd(&hs.valid[t], n_finite);
  __syncthreads();
  for (int i = tid; i < kBins; i += kBoundWarps * 32)
    if (hist[i]) atomicAdd(&hs.hist[t * kBins + i], hist[i]);
  if (!last_cta_of_row(&hs.ticket[t], s_last, tid)) return;
  pick_first_bin<kBoundWarps * 32>(hs, t);
}

// Step 2. grid (ceil(L / Keys), T), dynamic shared memory refine_smem(Hi). lo_state + t * 8: step 1's
// bin b and (+2) its count keff of finite lo, at most k (under k, or b = -1: every key up to q_pos is
// refined). Writes z [T, L] (the refined scores, -inf elsewhere) and their first histogram.
constexpr size_t refine_smem(int Hi) { return (size_t)Hi * kRefinePitch * 4; }
template <int Hi, int Keys>
__global__ void __launch_bounds__(kRefineWarps * 32)
    indexer_refine(const float* __restrict__ q, const float* __restrict__ k, const int64_t* __restrict__ k_off,
                   const float* __restrict__ w, const int32_t* __restrict__ q_pos, int64_t L, const float* __restrict__ hi,
                   const int* __restrict__ lo_state, float* __restrict__ z, ScoreHist hs, TopkWork wk, int32_t* __restrict__ out) {
  constexpr int Di = 128;
  extern __shared__ float q_s[];  // [Hi][kRefinePitch]
  __shared__ float w_s[Hi];
  __shared__ __align__(16) float k_s[kRefineWarps][kRefineGroup][Di];
  __shared__ int hist[kBins];
  __shared__ int list[Keys];
  __shared__ uint32_t okey[Keys];  // this CTA's finite refined scores (order keys) and their indices
  __shared__ int32_t oidx[Keys];
  __shared__ typename cub::BlockScan<int, kRefineWarps * 32>::TempStorage tmp;
  __shared__ int s_n, s_valid, s_base, s_last, s_bin, s_rest;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t t = blockIdx.y, beg = (int64_t)blockIdx.x * Keys, end = min(L, beg + Keys);
  const int64_t last = min((int64_t)q_pos[t], L - 1);
  const int b = lo_state[t * 8] < 0 || lo_state[t * 8 + 2] < hs.k ? -1 : lo_state[t * 8];  // -1: all
  if (k_off) k += k_off[t];
  const bool aligned16 = (reinterpret_cast<uintptr_t>(k) & 15) == 0;
  for (int i = tid; i < kBins; i += kRefineWarps * 32) hist[i] = 0;
  if (tid == 0) s_n = 0, s_valid = 0;
  __syncthreads();
  constexpr int per = Keys / (kRefineWarps * 32);
  float hv[per];
#pragma unroll
  for (int j = 0; j < per; ++j) {
    const int64_t i = beg + tid + j * kRefineWarps * 32;
    hv[j] = i < end && i <= last ? __ldg(hi + t * L + i) : -INFINITY;
  }
#pragma unroll
  for (int j = 0; j < per; ++j) {
    const int64_t i = beg + tid + j * kRefineWarps * 32;
    if (i >= end) continue;
    if (i <= last && (b < 0 || (int)(order_key(hv[j]) >> 21) >= b)) list[atomicAdd(&s_n, 1)] = (int)(i - beg);
    else z[t * L + i] = -INFINITY;
  }
  __syncthreads();
  const int n = s_n;
  if (n > 0) {
    // q's loads all issued before any is stored (one L2 latency, not one per loop trip).
    constexpr int kQPer = Hi * Di / 4 / (kRefineWarps * 32);  // float4 per thread
    float4 qv[kQPer];
#pragma unroll
    for (int j = 0; j < kQPer; ++j) qv[j] = __ldg(reinterpret_cast<const float4*>(q + t * Hi * Di) + tid + j * kRefineWarps * 32);
    if (tid < Hi) w_s[tid] = __ldg(w + t * Hi + tid);
#pragma unroll
    for (int j = 0; j < kQPer; ++j) {
      const int i = 4 * (tid + j * kRefineWarps * 32);
      float* dst = q_s + (i / Di) * kRefinePitch + i % Di;
      dst[0] = qv[j].x, dst[1] = qv[j].y, dst[2] = qv[j].z, dst[3] = qv[j].w;
    }
    __syncthreads();
    for (int c0 = warp * kRefineGroup; c0 < n; c0 += kRefineWarps * kRefineGroup) {
      const int m = min(kRefineGroup, n - c0);
      float4 kv[kRefineGroup];  // the group's keys: every load issued before any is stored
#pragma unroll
      for (int c = 0; c < kRefineGroup; ++c) {
        const float* kr = k + (beg + list[c0 + min(c, m - 1)]) * Di + 4 * lane;
        kv[c] = aligned16 ? __ldg(reinterpret_cast<const float4*>(kr)) : make_float4(kr[0], kr[1], kr[2], kr[3]);
      }
#pragma unroll
      for (int c = 0; c < kRefineGroup; ++c) *reinterpret_cast<float4*>(&k_s[warp][c][4 * lane]) = kv[c];
      __syncwarp();
      // The fp32 kernel's arithmetic: per head one fmaf chain over the dims, ascending, from 0.
      float acc[kRefineGroup][Hi / 32];
#pragma unroll
      for (int c = 0; c < kRefineGroup; ++c)
#pragma unroll
        for (int r = 0; r < Hi / 32; ++r) acc[c][r] = 0.f;
#pragma unroll 8
      for (int d = 0; d < Di; ++d) {
#pragma unroll
        for (int r = 0; r < Hi / 32; ++r) {
          const float qv = q_s[(lane + 32 * r) * kRefinePitch + d];
#pragma unroll
          for (int c = 0; c < kRefineGroup; ++c) acc[c][r] = fmaf(qv, k_s[warp][c][d], acc[c][r]);
        }
      }
      // Per lane group hg = 0..3: w[h] relu(dot_h) over h = hg, hg + 4, ... (one fmaf chain from 0), then
      // (p0 + p2) + (p1 + p3): lanes 0..3 gather the heads' values by shuffles (the group's chains interleaved).
      float pc[kRefineGroup];
#pragma unroll
      for (int c = 0; c < kRefineGroup; ++c) pc[c] = 0.f;
#pragma unroll
      for (int i = 0; i < Hi / 4; ++i) {
        const int h = (lane & 3) + 4 * i;
        const float wh = w_s[h];
#pragma unroll
        for (int c = 0; c < kRefineGroup; ++c) pc[c] = fmaf(wh, __shfl_sync(0xffffffffu, fmaxf(acc[c][i / 8], 0.f), h & 31), pc[c]);
      }
#pragma unroll
      for (int c = 0; c < kRefineGroup; ++c) {
        float p = pc[c];
        p += __shfl_xor_sync(0xffffffffu, p, 2);
        p += __shfl_xor_sync(0xffffffffu, p, 1);
        if (lane == 0 && c < m) {
          const int64_t i = beg + list[c0 + c];
          z[t * L + i] = p;
          if (isfinite(p)) {
            const uint32_t key = order_key(p);
            atomicAdd(&hist[key >> 21], 1);
            const int o = atomicAdd(&s_valid, 1);
            okey[o] = key, oidx[o] = (int32_t)i;
          }
        }
      }
      __syncwarp();  // k_s is read by every lane before the next group overwrites it
    }
  }
  __syncthreads();
  for (int i = tid; i < kBins; i += kRefineWarps * 32)
    if (hist[i]) atomicAdd(&hs.hist[t * kBins + i], hist[i]);
  // The row's list of finite refined scores (TopkWork's candidate list): one append per CTA.
  const int nv = s_valid;
  if (tid == 0) {
    s_base = nv ? atomicAdd(&wk.ncand[t], nv) : 0;
    if (nv) atomicAdd(&hs.valid[t], nv);
  }
  __syncthreads();
  for (int j = tid; j < nv; j += kRefineWarps * 32)
    if (s_base + j < kTopkCand) wk.ckey[t * kTopkCand + s_base + j] = okey[j], wk.cidx[t * kTopkCand + s_base + j] = oidx[j];
  if (!last_cta_of_row(&hs.ticket[t], s_last, tid)) return;
  pick_first_bin<kRefineWarps * 32>(hs, t);  // bin b1 of the k-th largest refined score -> state[t * 8 ..]
  __syncthreads();
  const int b1 = __ldcg(&wk.state[t * 8]), above = __ldcg(&wk.state[t * 8 + 1]), keff = __ldcg(&wk.state[t * 8 + 2]);
  const int n_list = __ldcg(&wk.ncand[t]);
  __syncthreads();  // every thread has read ncand before it is reset
  if (n_list <= kTopkCand) {  // the selection here; topk_collect then has nothing to do
    select_listed<kRefineWarps * 32>(wk.ckey + t * kTopkCand, wk.cidx + t * kTopkCand, n_list, b1, above, keff,
                                     wk.bitmap + t * wk.words, wk.words, hs.k, out + t * hs.k, hist, tmp, &s_bin, &s_rest);
  }
  if (tid == 0) {
    wk.state[t * 8 + 3] = n_list <= kTopkCand;  // topk_collect's done flag
    wk.ncand[t] = 0;
  }
}

constexpr int64_t kSelectMaxCells = (int64_t)1 << 26;  // T * L of hi, the work memory (256 MB; scratch slot 3)

bool select_supported(int64_t T, int64_t Hi, int64_t Di, int64_t L, int64_t k, const float* q) {
  return T > 0 && T <= kTopkRowsPerPass && T * L <= kSelectMaxCells && Di == 128 && (Hi == 32 || Hi == 64) && topk_multi(L, k) &&
         reinterpret_cast<uintptr_t>(q) % 16 == 0;
}

template <int NT>
void run_select(const float* q, const float* k, const int64_t* k_off, const float* w, const int32_t* qpos, int64_t T, int64_t L,
                int64_t topk, float* scores, int32_t* out) {
  const TopkWork wk = topk_work(T, L);
  float* hi = static_cast<float*>(scratch(3, (size_t)T * (size_t)L * 4));  // hi [T][L]
  ScoreHist h1;  // step 1's bin into state[t * 8 + 4 ..]; step 2's into state[t * 8 ..], where topk_collect reads it
  h1.hist = wk.hist, h1.valid = wk.valid, h1.ticket = wk.ticket1, h1.state = wk.state + 4, h1.k = (int)topk;
  ScoreHist h2 = h1;
  h2.state = wk.state;
  const int sms = device_sm_count();
  // Two CTAs of 8 warps per SM over all rows, at least one 16-key tile per warp.
  const int64_t tiles = (L + 15) / 16;
  const int64_t per_row = std::max<int64_t>(1, std::min<int64_t>((tiles + kBoundWarps - 1) / kBoundWarps, (2 * (int64_t)sms + T - 1) / T));
  static bool attr_set[64];
  if (!attr_set[current_device() & 63]) {  // once per device: no attribute call in a captured step
    MLACONF_CUDA_CHECK(cudaFuncSetAttribute(indexer_refine<8 * NT, kRefineKeysSmall>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)refine_smem(8 * NT)));
    MLACONF_CUDA_CHECK(cudaFuncSetAttribute(indexer_refine<8 * NT, kRefineKeysLarge>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)refine_smem(8 * NT)));
    attr_set[current_device() & 63] = true;
  }
  indexer_bounds_mma<NT><<<dim3((unsigned)per_row, (unsigned)T), kBoundWarps * 32, 0, cur_stream()>>>(
      q, k, k_off, w, qpos, L, hi, h1, active_fault() == Fault::IndexerNoBound);
  MLACONF_CUDA_LAUNCH_CHECK("indexer_bounds_mma");
  // The refine CTAs' size by shape (kRefineKeysSmall's comment); the selection is the same either way.
  if (T * ceil_div(L, kRefineKeysLarge) >= 2 * (int64_t)sms)
    indexer_refine<8 * NT, kRefineKeysLarge><<<dim3(ceil_div(L, kRefineKeysLarge), (unsigned)T), kRefineWarps * 32, refine_smem(8 * NT),
                                               cur_stream()>>>(q, k, k_off, w, qpos, L, hi, wk.state + 4, scores, h2, wk, out);
  else
    indexer_refine<8 * NT, kRefineKeysSmall><<<dim3(ceil_div(L, kRefineKeysSmall), (unsigned)T), kRefineWarps * 32, refine_smem(8 * NT),
                                               cur_stream()>>>(q, k, k_off, w, qpos, L, hi, wk.state + 4, scores, h2, wk, out);
  MLACONF_CUDA_LAUNCH_CHECK("indexer_refine");
  // Only for rows whose refined list overflowed (more than kTopkCand finite scores): the others return at once.
  launch_topk_collect(scores, T, L, (int)topk, wk, out, wk.state + 3);
}
}  // namespace

void indexer_select_f32_rows(const float* d_q, const float* d_k, const int64_t* d_k_off, const float* d_w, const int32_t* d_qpos,
                             int64_t T, int64_t Hi, int64_t Di, int64_t L, int64_t k, float* d_scores, int32_t* d_out) {
  if (k <= 0 || k > INT32_MAX || L < 0) throw InputError("cuda::indexer_select_f32_rows: bad k or L");
  if (!select_supported(T, Hi, Di, L, k, d_q)) return indexer_topk_f32_rows(d_q, d_k, d_k_off, d_w, d_qpos, T, Hi, Di, L, k, d_scores, d_out);
  if (Hi == 32) run_select<4>(d_q, d_k, d_k_off, d_w, d_qpos, T, L, k, d_scores, d_out);
  else run_select<8>(d_q, d_k, d_k_off, d_w, d_qpos, T, L, k, d_scores, d_out);
}

}  // namespace mlaconf::cuda
