// mlaconf optimized: the DSA lightning indexer's scores (score[t, s] = sum_h w[t, h] relu(q[t, h] . k[s])): the SIMT
// kernel for any shape, the register-tiled fp32 kernel (the pipeline's), with the multi-CTA top-k's first pass
// fused in, and the tensor-core kernel for fp16 q and keys; and indexer_topk_f32_rows (scores, then top-k).
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

void indexer_topk_f32_rows(const float* d_q, const float* d_k, const int64_t* d_k_off, const float* d_w, const int32_t* d_qpos,
                           int64_t T, int64_t Hi, int64_t Di, int64_t L, int64_t k, float* d_scores, int32_t* d_out) {
  if (k <= 0 || k > INT32_MAX || L < 0) throw InputError("cuda::indexer_topk_f32_rows: bad k or L");
  if (T > 0 && T <= kTopkRowsPerPass && f32_tiled_supported(Hi, Di) && topk_multi(L, k)) {
    const TopkWork w = topk_work(T, L);
    ScoreHist hs;
    hs.hist = w.hist, hs.valid = w.valid, hs.ticket = w.ticket1, hs.state = w.state, hs.k = (int)k;
    launch_scores_f32_tiled(d_q, d_k, d_k_off, d_w, d_qpos, T, Hi, Di, L, d_scores, hs);
    launch_topk_collect(d_scores, T, L, (int)k, w, d_out);
    return;
  }
  if (d_k_off) indexer_scores_f32_rows(d_q, d_k, d_k_off, d_w, d_qpos, T, Hi, Di, L, d_scores);
  else indexer_scores_f32(d_q, d_k, d_w, d_qpos, T, Hi, Di, L, d_scores);
  topk_rows(d_scores, T, L, k, d_out);
}

}  // namespace mlaconf::cuda
