// mlaconf optimized: the DSA lightning indexer (fused scores) and the per-row top-k (radix select).
#include <cub/block/block_scan.cuh>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"
#include "optimized/faults.h"
#include "optimized/mma.cuh"

namespace mlaconf::cuda {
namespace {

constexpr int kScoreThreads = 256;
constexpr int kGroup = 4;                           // threads per key (heads split among them)
constexpr int kKeys = kScoreThreads / kGroup;       // keys per CTA

// grid (ceil(L / kKeys), T). score[t, s] = sum_h w[t,h] relu(q[t,h] . k[s]), -inf for s > q_pos[t].
// In = __half (fp16 q and key cache) or float (fp32 indexer, the pipeline's choice: near-ties decide
// the selection, and fp16 rounding of q and k moves scores by ~1e-3 relative).
__device__ __forceinline__ float2 ld2(const __half* p) { return __half22float2(*reinterpret_cast<const __half2*>(p)); }
__device__ __forceinline__ float2 ld2(const float* p) { return make_float2(p[0], p[1]); }

template <class In>
__global__ void __launch_bounds__(kScoreThreads) indexer_scores_kernel(const In* q, const In* k, int64_t k_stride,
                                                                      const int64_t* k_off, const float* w,
                                                                      const int32_t* q_pos, int Hi, int Di, int64_t L,
                                                                      float* scores) {
  extern __shared__ __align__(16) unsigned char smem[];
  // Row pitch: an odd number of 4-byte words (no bank conflicts), even element count (pair loads).
  const int ld = sizeof(In) == 2 ? Di + 2 : Di + 1;
  In* q_s = reinterpret_cast<In*>(smem);  // [Hi][ld]
  In* k_s = q_s + Hi * ld;                // [kKeys][ld]
  float* w_s = reinterpret_cast<float*>(k_s + kKeys * ld);
  const int64_t t = blockIdx.y, s0 = (int64_t)blockIdx.x * kKeys;
  const int tid = threadIdx.x;
  k += k_off ? k_off[t] : t * k_stride;  // this query's keys (k_stride 0: keys shared by all queries)
  const int64_t last = q_pos[t];  // causal: keys 0..last
  if (s0 > last) {                // the whole tile is in the future
    for (int i = tid; i < kKeys; i += kScoreThreads)
      if (s0 + i < L) scores[t * L + s0 + i] = -INFINITY;
    return;
  }
  for (int i = tid; i < Hi * Di; i += kScoreThreads) {
    const int h = i / Di, c = i - h * Di;
    q_s[h * ld + c] = q[(t * Hi + h) * Di + c];
  }
  for (int i = tid; i < Hi; i += kScoreThreads) w_s[i] = w[t * Hi + i];
  for (int i = tid; i < kKeys * Di; i += kScoreThreads) {
    const int r = i / Di, c = i - r * Di;
    const int64_t s = s0 + r;
    k_s[r * ld + c] = s < L ? k[s * Di + c] : In(0.f);
  }
  __syncthreads();
  const int key = tid / kGroup, g = tid % kGroup;
  const In* kr = k_s + key * ld;
  float total = 0.f;
  for (int h = g; h < Hi; h += kGroup) {
    const In* qr = q_s + h * ld;
    float d = 0.f;
    for (int c = 0; c < Di; c += 2) {
      const float2 a = ld2(qr + c), b = ld2(kr + c);
      d = fmaf(a.x, b.x, d);
      d = fmaf(a.y, b.y, d);
    }
    total = fmaf(w_s[h], fmaxf(d, 0.f), total);
  }
#pragma unroll
  for (int o = kGroup / 2; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
  const int64_t s = s0 + key;
  if (g == 0 && s < L) scores[t * L + s] = s <= last ? total : -INFINITY;
}

template <class In>
void launch_scores(const In* q, const In* k, int64_t k_stride, const float* w, const int32_t* qpos, int64_t T, int64_t Hi,
                   int64_t Di, int64_t L, float* scores, const int64_t* k_off = nullptr) {
  if (Hi <= 0 || Di <= 0 || Di % 2 || Hi > 128 || Di > 512)
    throw NotSupported("cuda::indexer_scores: " + std::to_string(Hi) + " heads x " + std::to_string(Di));
  if (T == 0 || L == 0) return;
  const size_t smem = (size_t)(Hi + kKeys) * (Di + 2) * sizeof(In) + Hi * 4 + 16;
  if (smem > 99 * 1024) throw NotSupported("cuda::indexer_scores: shared memory for " + std::to_string(Hi) + " heads x " + std::to_string(Di));
  static size_t attr_smem[64] = {};  // the largest allowance set per device (no attribute call in a captured step)
  if (smem > attr_smem[current_device() & 63]) {
    MLACONF_CUDA_CHECK(cudaFuncSetAttribute(indexer_scores_kernel<In>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attr_smem[current_device() & 63] = smem;
  }
  dim3 grid(ceil_div(L, kKeys), (unsigned)T);
  indexer_scores_kernel<In><<<grid, kScoreThreads, smem, cur_stream()>>>(q, k, k_stride, k_off, w, qpos, (int)Hi, (int)Di, L, scores);
  MLACONF_CUDA_LAUNCH_CHECK("indexer_scores_kernel");
}

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
  if (tid == 0) {
    h.state[t * 8 + 0] = s_bin;
    h.state[t * 8 + 1] = keff - s_rest;
    h.state[t * 8 + 2] = keff;
    h.valid[t] = 0;
    h.ticket[t] = 0;
  }
}

// ---- fp32 scores, register-tiled (the pipeline's indexer) ---------------------------------------
// The same arithmetic as indexer_scores_kernel<float>, bit for bit, at the rate of the FFMA pipes:
//  - dot(q[h], k[s]) is one fmaf chain over the dims in ascending order, starting from 0;
//  - per key, lane group g (g = 0..3) sums w[h] * relu(dot) over its heads h = g, g + 4, g + 8, ...
//    (ascending, one fmaf chain from 0), and the four partial sums meet by xor shuffles 2 then 1:
//    score = (p0 + p2) + (p1 + p3).
// Padded heads (Hi rounded up to 4 * NH) have q = 0 and w = 0: they add an exact zero. So the score
// of (query, key) depends on that query's q and w and that key only, never on the batch, the tile or
// the launch shape (batch-invariant), and every fp32 entry point gives the same bits.
// A warp takes 32-key tiles (grid-stride over the row): lane (kg = lane / 4, hg = lane % 4) keeps the
// 4 x NH dot products of keys kg + 8j (j < 4) and heads hg + 4i (i < NH) in registers. The keys stream
// through warp-private shared memory in chunks of 32 dims (16-byte cp.async, 3 stages, about 8 KB in
// flight per warp); q [Hi][Di] sits in shared memory once per CTA. Per 4 dims a lane issues 4 + NH
// 16-byte shared loads (conflict-free: pitches of an odd number of 16-byte words) for 16 NH FFMA.
// Keys above q_pos are not read (their tiles write -inf; a partial tile reads its last valid key again).
constexpr int kF32Warps = 4;
constexpr int kF32Keys = 32;                 // keys per warp tile
constexpr int kF32Chunk = 32;                // dims per pipeline stage
constexpr int kF32Pitch = kF32Chunk + 4;     // floats per staged key: 9 16-byte words
constexpr int kF32Stages = 3;
constexpr int kF32StageFloats = kF32Keys * kF32Pitch;

// q's row pitch in floats: Di + 4 or Di + 8, whichever is an odd number of 16-byte words.
__host__ __device__ constexpr int f32_q_pitch(int Di) { return (Di / 4 + 1) % 2 ? Di + 4 : Di + 8; }
size_t f32_tiled_smem(int NH, int Di) {
  return ((size_t)4 * NH * f32_q_pitch(Di) + 4 * NH + (size_t)kF32Warps * kF32Stages * kF32StageFloats) * 4;
}

__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}

// grid (CTAs per row, T). Di % 4 == 0.
// HIST: also the multi-CTA top-k's first histogram of the row's finite scores (ScoreHist).
template <int NH, bool HIST>
__global__ void __launch_bounds__(kF32Warps * 32, 3)
    indexer_scores_f32_tiled(const float* __restrict__ q, const float* __restrict__ k, const int64_t* __restrict__ k_off,
                             const float* __restrict__ w, const int32_t* __restrict__ q_pos, int Hi, int Di, int64_t L,
                             float* __restrict__ scores, ScoreHist hs) {
  extern __shared__ __align__(16) float fsm[];
  constexpr int Hp = 4 * NH;
  const int qp = f32_q_pitch(Di);
  float* q_s = fsm;             // [Hp][qp]
  float* w_s = q_s + Hp * qp;   // [Hp]
  float* k_s = w_s + Hp;        // [warps][stages][32 keys][kF32Pitch]
  const int64_t t = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, kg = lane >> 2, hg = lane & 3;
  if (k_off) k += k_off[t];
  const int64_t last = min((int64_t)q_pos[t], L - 1);  // causal: keys 0..last
  for (int i = tid; i < Hp * Di; i += kF32Warps * 32) {
    const int h = i / Di, c = i - h * Di;
    q_s[h * qp + c] = h < Hi ? q[(t * Hi + h) * Di + c] : 0.f;
  }
  for (int i = tid; i < Hp; i += kF32Warps * 32) w_s[i] = i < Hi ? w[t * Hi + i] : 0.f;
  __syncthreads();

  const int64_t tiles = (L + kF32Keys - 1) / kF32Keys;
  const int64_t first = (int64_t)blockIdx.x * kF32Warps + warp, stride = (int64_t)gridDim.x * kF32Warps;
  const int n_chunks = (Di + kF32Chunk - 1) / kF32Chunk;
  const int64_t n_steps = (first < tiles ? (tiles - 1 - first) / stride + 1 : 0) * n_chunks;  // (tile, chunk) pairs
  float* kw = k_s + warp * (kF32Stages * kF32StageFloats);
  const uint32_t kw_addr = (uint32_t)__cvta_generic_to_shared(kw);
  const bool aligned16 = (reinterpret_cast<uintptr_t>(k) & 15) == 0;  // else 4-byte copies (same values)

  auto issue = [&](int64_t st) {
    if (st < n_steps) {
      const int64_t s0 = (first + (st / n_chunks) * stride) * kF32Keys;
      if (s0 <= last) {
        const int d0 = (int)(st % n_chunks) * kF32Chunk, parts = min(kF32Chunk, Di - d0) / 4;
        const uint32_t buf = kw_addr + (uint32_t)((st % kF32Stages) * kF32StageFloats * 4);
#pragma unroll
        for (int c = lane; c < kF32Keys * (kF32Chunk / 4); c += 32) {
          const int r = c / (kF32Chunk / 4), p = c % (kF32Chunk / 4);
          if (p < parts) {
            const float* src = k + min(s0 + r, last) * Di + d0 + 4 * p;
            const uint32_t dst = buf + (uint32_t)((r * kF32Pitch + 4 * p) * 4);
            if (aligned16) {
              cp_async_16(dst, src, 16);
            } else {
#pragma unroll
              for (int e = 0; e < 4; ++e) cp_async_4(dst + 4 * e, src + e);
            }
          }
        }
      }
    }
    cp_async_commit();  // possibly empty: keeps the wait count uniform
  };

#pragma unroll
  for (int s = 0; s < kF32Stages - 1; ++s) issue(s);
  float acc[4][NH];
  int n_finite = 0;  // (HIST) this lane's finite scores
  for (int64_t st = 0; st < n_steps; ++st) {
    issue(st + kF32Stages - 1);
    cp_async_wait<kF32Stages - 1>();
    __syncwarp();  // every lane's copies of stage st are visible to the warp
    const int chunk = (int)(st % n_chunks);
    const int64_t s0 = (first + (st / n_chunks) * stride) * kF32Keys;
    if (chunk == 0) {
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int i = 0; i < NH; ++i) acc[j][i] = 0.f;
    }
    if (s0 <= last) {
      const float* kb = kw + (st % kF32Stages) * kF32StageFloats + kg * kF32Pitch;
      const float* qb = q_s + hg * qp + chunk * kF32Chunk;
      const int parts = min(kF32Chunk, Di - chunk * kF32Chunk) / 4;
#pragma unroll 1
      for (int p = 0; p < parts; ++p) {
        float4 a[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) a[j] = *reinterpret_cast<const float4*>(kb + j * 8 * kF32Pitch + 4 * p);
#pragma unroll
        for (int i = 0; i < NH; ++i) {
          const float4 b = *reinterpret_cast<const float4*>(qb + 4 * i * qp + 4 * p);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            acc[j][i] = fmaf(b.x, a[j].x, acc[j][i]);
            acc[j][i] = fmaf(b.y, a[j].y, acc[j][i]);
            acc[j][i] = fmaf(b.z, a[j].z, acc[j][i]);
            acc[j][i] = fmaf(b.w, a[j].w, acc[j][i]);
          }
        }
      }
    }
    if (chunk == n_chunks - 1) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float total = 0.f;
#pragma unroll
        for (int i = 0; i < NH; ++i) total = fmaf(w_s[hg + 4 * i], fmaxf(acc[j][i], 0.f), total);
        total += __shfl_xor_sync(0xffffffffu, total, 2);
        total += __shfl_xor_sync(0xffffffffu, total, 1);
        const int64_t s = s0 + kg + 8 * j;
        if (hg == 0 && s < L) scores[t * L + s] = s <= last ? total : -INFINITY;
        if constexpr (HIST) {  // the written score's bin when finite; adds aggregated per warp and bin
          int bucket = -1;
          if (hg == 0 && s <= last && isfinite(total)) bucket = (int)(order_key(total) >> 21), ++n_finite;
          const unsigned peers = __match_any_sync(0xffffffffu, bucket);
          if (bucket >= 0 && lane == __ffs(peers) - 1) atomicAdd(&hs.hist[t * kBins + bucket], __popc(peers));
        }
      }
    }
    __syncwarp();  // every lane is done with stage st before the next issue overwrites it
  }
  cp_async_wait<0>();
  if constexpr (HIST) {
    __shared__ int s_last;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) n_finite += __shfl_xor_sync(0xffffffffu, n_finite, o);
    if (lane == 0 && n_finite) atomicAdd(&hs.valid[t], n_finite);
    if (!last_cta_of_row(&hs.ticket[t], s_last, tid)) return;
    pick_first_bin<kF32Warps * 32>(hs, t);
  }
}

bool f32_tiled_supported(int64_t Hi, int64_t Di) {
  if (Di <= 0 || Di % 4 || Hi <= 0 || Hi > 64) return false;
  return f32_tiled_smem(Hi <= 8 ? 2 : Hi <= 16 ? 4 : Hi <= 32 ? 8 : 16, (int)Di) <= 99 * 1024;
}

template <int NH, bool HIST>
void launch_f32_tiled(dim3 grid, size_t smem, const float* q, const float* k, const int64_t* k_off, const float* w,
                      const int32_t* qpos, int64_t Hi, int64_t Di, int64_t L, float* scores, const ScoreHist& hs) {
  indexer_scores_f32_tiled<NH, HIST><<<grid, kF32Warps * 32, smem, cur_stream()>>>(q, k, k_off, w, qpos, (int)Hi, (int)Di, L, scores, hs);
  MLACONF_CUDA_LAUNCH_CHECK("indexer_scores_f32_tiled");
}

// The tiled kernel (f32_tiled_supported shapes). hs.hist set (T <= 65535): also the top-k's first pass.
template <int NH, bool HIST>
void run_f32_tiled(const float* q, const float* k, const int64_t* k_off, const float* w, const int32_t* qpos, int64_t T,
                   int64_t Hi, int64_t Di, int64_t L, float* scores, const ScoreHist& hs) {
  const size_t smem = f32_tiled_smem(NH, (int)Di);
  const auto fn = indexer_scores_f32_tiled<NH, HIST>;
  // Per device and kernel: the largest allowance set, and the resident CTAs per SM at the size last
  // asked for (no attribute call once set: a captured step makes none; the occupancy query is no
  // stream operation).
  struct Cfg {
    size_t allowed = 0, occ_smem = 0;
    int ctas = 0;
  };
  static Cfg cfg[64];
  Cfg& c = cfg[current_device() & 63];
  if (smem > c.allowed) {
    MLACONF_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    c.allowed = smem;
  }
  if (smem != c.occ_smem) {
    int per_sm = 0, sms = 0;
    MLACONF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kF32Warps * 32, smem));
    MLACONF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, current_device()));
    c.occ_smem = smem;
    c.ctas = std::max(1, per_sm) * sms;
  }
  const int64_t tiles = (L + kF32Keys - 1) / kF32Keys;
  for (int64_t t0 = 0; t0 < T; t0 += 65535) {
    const int64_t nt = std::min<int64_t>(65535, T - t0);
    // One wave of resident CTAs over all rows, at least one tile per warp.
    const int64_t per_row = std::max<int64_t>(1, std::min<int64_t>((tiles + kF32Warps - 1) / kF32Warps, (c.ctas + nt - 1) / nt));
    launch_f32_tiled<NH, HIST>(dim3((unsigned)per_row, (unsigned)nt), smem, q + t0 * Hi * Di, k, k_off ? k_off + t0 : nullptr,
                               w + t0 * Hi, qpos + t0, Hi, Di, L, scores + t0 * L, hs);
  }
}

// True when the tiled kernel ran: fp32, f32_tiled_supported(Hi, Di). (The other shapes run
// indexer_scores_kernel<float>, which computes the same bits.)
bool launch_scores_f32_tiled(const float* q, const float* k, const int64_t* k_off, const float* w, const int32_t* qpos,
                             int64_t T, int64_t Hi, int64_t Di, int64_t L, float* scores, const ScoreHist& hs = {}) {
  if (!f32_tiled_supported(Hi, Di)) return false;
  if (T == 0 || L == 0) return true;
  const bool h = hs.hist != nullptr;
  if (Hi <= 8) h ? run_f32_tiled<2, true>(q, k, k_off, w, qpos, T, Hi, Di, L, scores, hs) : run_f32_tiled<2, false>(q, k, k_off, w, qpos, T, Hi, Di, L, scores, hs);
  else if (Hi <= 16) h ? run_f32_tiled<4, true>(q, k, k_off, w, qpos, T, Hi, Di, L, scores, hs) : run_f32_tiled<4, false>(q, k, k_off, w, qpos, T, Hi, Di, L, scores, hs);
  else if (Hi <= 32) h ? run_f32_tiled<8, true>(q, k, k_off, w, qpos, T, Hi, Di, L, scores, hs) : run_f32_tiled<8, false>(q, k, k_off, w, qpos, T, Hi, Di, L, scores, hs);
  else h ? run_f32_tiled<16, true>(q, k, k_off, w, qpos, T, Hi, Di, L, scores, hs) : run_f32_tiled<16, false>(q, k, k_off, w, qpos, T, Hi, Di, L, scores, hs);
  return true;
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

// ---- tensor-core scores for fp16 q and keys, Di = 128, Hi = 8 * NT ----------------------------------
// S[key, head] = k[key] . q[head] with mma.sync m16n8k16 (fp16 in, fp32 accumulate), straight from
// global memory: no shared memory, no barrier. The dot product does not care in which order its 128
// terms come, so the k dimension is permuted to make every fragment a run of 16-byte loads: lane (g, t)
// reads dims 32c + 8t .. 32c + 8t + 7 (c = 0..3) of its keys g and g + 8, and k-step s takes the
// half-words 4(s % 2) .. 4(s % 2) + 3 of chunk s / 2; q's B fragments use the same permutation. Lanes
// t = 0..3 read 64 contiguous bytes of a key, so each load instruction is coalesced. Each warp takes
// 16-key tiles (grid-stride); the quad of a key sums w[h] * relu(S[key, h]) over its heads.
template <int NT>
__global__ void __launch_bounds__(256) indexer_scores_mma(const __half* __restrict__ q, const __half* __restrict__ k,
                                                          int64_t k_stride, const float* __restrict__ w,
                                                          const int32_t* __restrict__ q_pos, int64_t L,
                                                          float* __restrict__ scores) {
  constexpr int Di = 128, Hi = 8 * NT;
  const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int64_t t = blockIdx.y;
  const int64_t last = q_pos[t];
  k += t * k_stride;  // this query's keys (0: keys shared by all queries)
  uint4 qb[NT][4];
  float wv[NT][2];
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const uint4* qr = reinterpret_cast<const uint4*>(q + (t * Hi + n * 8 + g) * Di);
#pragma unroll
    for (int c = 0; c < 4; ++c) qb[n][c] = __ldg(qr + 4 * c + tq);
    wv[n][0] = __ldg(w + t * Hi + n * 8 + 2 * tq);
    wv[n][1] = __ldg(w + t * Hi + n * 8 + 2 * tq + 1);
  }
  const int64_t n_tiles = (L + 15) / 16;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t tile = (int64_t)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5); tile < n_tiles; tile += warps) {
    const int64_t key0 = tile * 16, kA = key0 + g, kB = kA + 8;
    float sA = -INFINITY, sB = -INFINITY;
    if (key0 <= last) {  // else the whole tile is in the future
      const uint4* ra = reinterpret_cast<const uint4*>(k + min(kA, L - 1) * Di);
      const uint4* rb = reinterpret_cast<const uint4*>(k + min(kB, L - 1) * Di);
      uint4 a4[4], b4[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) a4[c] = __ldg(ra + 4 * c + tq), b4[c] = __ldg(rb + 4 * c + tq);
      float acc[NT][4];
#pragma unroll
      for (int n = 0; n < NT; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        const uint4 ca = a4[s / 2], cb = b4[s / 2];
        const uint32_t a[4] = {s % 2 ? ca.z : ca.x, s % 2 ? cb.z : cb.x, s % 2 ? ca.w : ca.y, s % 2 ? cb.w : cb.y};
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          const uint4 qq = qb[n][s / 2];
          mma_16816(acc[n], a, s % 2 ? qq.z : qq.x, s % 2 ? qq.w : qq.y);
        }
      }
      float tA, tB;
      relu_weighted<NT>(acc, wv, tA, tB);
      tA += __shfl_xor_sync(0xffffffffu, tA, 1);
      tA += __shfl_xor_sync(0xffffffffu, tA, 2);
      tB += __shfl_xor_sync(0xffffffffu, tB, 1);
      tB += __shfl_xor_sync(0xffffffffu, tB, 2);
      sA = kA <= last ? tA : -INFINITY;
      sB = kB <= last ? tB : -INFINITY;
    }
    if (tq == 0) {
      if (kA < L) scores[t * L + kA] = sA;
      if (kB < L) scores[t * L + kB] = sB;
    }
  }
}

// True when the tensor-core kernel ran: fp16, Di = 128, Hi = 32 or 64, 16-byte aligned q and keys.
bool launch_scores_mma(const __half* q, const __half* k, int64_t k_stride, const float* w, const int32_t* qpos, int64_t T,
                       int64_t Hi, int64_t Di, int64_t L, float* scores) {
  if (Di != 128 || (Hi != 32 && Hi != 64) || reinterpret_cast<uintptr_t>(q) % 16 || reinterpret_cast<uintptr_t>(k) % 16 ||
      k_stride % 8 || T > 65535)
    return false;
  int dev = 0, sms = 0;
  MLACONF_CUDA_CHECK(cudaGetDevice(&dev));
  MLACONF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  // Enough 8-warp CTAs for 4 per SM over all rows, at most one 16-key tile per warp.
  const int64_t tiles = (L + 15) / 16;
  const int64_t per_row = std::max<int64_t>(1, std::min<int64_t>((tiles + 7) / 8, (4 * (int64_t)sms + T - 1) / T));
  const dim3 grid((unsigned)per_row, (unsigned)T);
  if (Hi == 32) indexer_scores_mma<4><<<grid, 256, 0, cur_stream()>>>(q, k, k_stride, w, qpos, L, scores);
  else indexer_scores_mma<8><<<grid, 256, 0, cur_stream()>>>(q, k, k_stride, w, qpos, L, scores);
  MLACONF_CUDA_LAUNCH_CHECK("indexer_scores_mma");
  return true;
}

constexpr int kTopkThreads = 1024;

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
constexpr int kTopkCap = 3072;          // largest k of the multi-CTA path
constexpr int kTopkCand = 16384;        // candidates per row (bin b1's elements)
constexpr int kTopkChunk = 8192;        // elements per CTA
constexpr int64_t kTopkMultiMinL = 16384;
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
  if (tid == 0) {
    w.state[t * 8 + 0] = s_bin;
    w.state[t * 8 + 1] = keff - s_rest;
    w.state[t * 8 + 2] = keff;
    w.valid[t] = 0;
    w.ticket1[t] = 0;
  }
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

// Rows that take the multi-CTA top-k (the fault's tie rule lives in the one-CTA kernel only). It runs
// kTopkRowsPerPass rows at a time, so that its work memory (about 140 KB per row) stays bounded for a
// long prefill.
constexpr int64_t kTopkRowsPerPass = 512;
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
// with 1024 (B = 1: many CTAs, each refining few keys), else 1024 (H200, PERF_H200 v9: B = 1 at 32K 58.3 ->
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
  topk_collect<<<dim3(ceil_div(L, kTopkChunk), (unsigned)T), kTopkThreads, 0, cur_stream()>>>(scores, L, (int)topk, wk, out, wk.state + 3);
  MLACONF_CUDA_LAUNCH_CHECK("topk_collect");
}

}  // namespace

void indexer_scores_batched(const uint16_t* d_q, const uint16_t* d_k, int64_t k_stride, const float* d_w,
                            const int32_t* d_qpos, int64_t T, int64_t Hi, int64_t Di, int64_t L, float* d_scores) {
  if (k_stride < 0) throw InputError("cuda::indexer_scores: negative key stride");
  const __half* q = reinterpret_cast<const __half*>(d_q);
  const __half* k = reinterpret_cast<const __half*>(d_k);
  if (T > 0 && L > 0 && launch_scores_mma(q, k, k_stride, d_w, d_qpos, T, Hi, Di, L, d_scores)) return;
  launch_scores(q, k, k_stride, d_w, d_qpos, T, Hi, Di, L, d_scores);
}
void indexer_scores(const uint16_t* d_q, const uint16_t* d_k, const float* d_w, const int32_t* d_qpos, int64_t T,
                    int64_t Hi, int64_t Di, int64_t L, float* d_scores) {
  indexer_scores_batched(d_q, d_k, 0, d_w, d_qpos, T, Hi, Di, L, d_scores);
}
void indexer_scores_f32(const float* d_q, const float* d_k, const float* d_w, const int32_t* d_qpos, int64_t T, int64_t Hi,
                        int64_t Di, int64_t L, float* d_scores) {
  if (launch_scores_f32_tiled(d_q, d_k, nullptr, d_w, d_qpos, T, Hi, Di, L, d_scores)) return;
  launch_scores(d_q, d_k, 0, d_w, d_qpos, T, Hi, Di, L, d_scores);
}

void indexer_scores_f32_rows(const float* d_q, const float* d_k, const int64_t* d_k_off, const float* d_w, const int32_t* d_qpos,
                             int64_t T, int64_t Hi, int64_t Di, int64_t L, float* d_scores) {
  if (launch_scores_f32_tiled(d_q, d_k, d_k_off, d_w, d_qpos, T, Hi, Di, L, d_scores)) return;
  launch_scores(d_q, d_k, 0, d_w, d_qpos, T, Hi, Di, L, d_scores, d_k_off);
}

void indexer_scores_f32_simt(const float* d_q, const float* d_k, const int64_t* d_k_off, const float* d_w, const int32_t* d_qpos,
                             int64_t T, int64_t Hi, int64_t Di, int64_t L, float* d_scores) {
  if (T > 65535) throw NotSupported("cuda::indexer_scores_f32_simt: more than 65535 rows");
  launch_scores(d_q, d_k, 0, d_w, d_qpos, T, Hi, Di, L, d_scores, d_k_off);
}

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
      topk_collect<<<grid, kTopkThreads, 0, cur_stream()>>>(d_scores + t0 * L, L, (int)k, w, d_out + t0 * k);
      MLACONF_CUDA_LAUNCH_CHECK("topk_collect");
    }
    return;
  }
  topk_kernel<<<(unsigned)T, kTopkThreads, 0, cur_stream()>>>(d_scores, L, (int)k, upper_tie, d_out);
  MLACONF_CUDA_LAUNCH_CHECK("topk_kernel");
}

void indexer_topk_f32_rows(const float* d_q, const float* d_k, const int64_t* d_k_off, const float* d_w, const int32_t* d_qpos,
                           int64_t T, int64_t Hi, int64_t Di, int64_t L, int64_t k, float* d_scores, int32_t* d_out) {
  if (k <= 0 || k > INT32_MAX || L < 0) throw InputError("cuda::indexer_topk_f32_rows: bad k or L");
  if (T > 0 && T <= kTopkRowsPerPass && f32_tiled_supported(Hi, Di) && topk_multi(L, k)) {
    const TopkWork w = topk_work(T, L);
    ScoreHist hs;
    hs.hist = w.hist, hs.valid = w.valid, hs.ticket = w.ticket1, hs.state = w.state, hs.k = (int)k;
    launch_scores_f32_tiled(d_q, d_k, d_k_off, d_w, d_qpos, T, Hi, Di, L, d_scores, hs);
    topk_collect<<<dim3(ceil_div(L, kTopkChunk), (unsigned)T), kTopkThreads, 0, cur_stream()>>>(d_scores, L, (int)k, w, d_out);
    MLACONF_CUDA_LAUNCH_CHECK("topk_collect");
    return;
  }
  if (d_k_off) indexer_scores_f32_rows(d_q, d_k, d_k_off, d_w, d_qpos, T, Hi, Di, L, d_scores);
  else indexer_scores_f32(d_q, d_k, d_w, d_qpos, T, Hi, Di, L, d_scores);
  topk_rows(d_scores, T, L, k, d_out);
}

void indexer_select_f32_rows(const float* d_q, const float* d_k, const int64_t* d_k_off, const float* d_w, const int32_t* d_qpos,
                             int64_t T, int64_t Hi, int64_t Di, int64_t L, int64_t k, float* d_scores, int32_t* d_out) {
  if (k <= 0 || k > INT32_MAX || L < 0) throw InputError("cuda::indexer_select_f32_rows: bad k or L");
  if (!select_supported(T, Hi, Di, L, k, d_q)) return indexer_topk_f32_rows(d_q, d_k, d_k_off, d_w, d_qpos, T, Hi, Di, L, k, d_scores, d_out);
  if (Hi == 32) run_select<4>(d_q, d_k, d_k_off, d_w, d_qpos, T, L, k, d_scores, d_out);
  else run_select<8>(d_q, d_k, d_k_off, d_w, d_qpos, T, L, k, d_scores, d_out);
}

}  // namespace mlaconf::cuda
