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
                                                                      const float* w, const int32_t* q_pos, int Hi, int Di,
                                                                      int64_t L, float* scores) {
  extern __shared__ __align__(16) unsigned char smem[];
  // Row pitch: an odd number of 4-byte words (no bank conflicts), even element count (pair loads).
  const int ld = sizeof(In) == 2 ? Di + 2 : Di + 1;
  In* q_s = reinterpret_cast<In*>(smem);  // [Hi][ld]
  In* k_s = q_s + Hi * ld;                // [kKeys][ld]
  float* w_s = reinterpret_cast<float*>(k_s + kKeys * ld);
  const int64_t t = blockIdx.y, s0 = (int64_t)blockIdx.x * kKeys;
  const int tid = threadIdx.x;
  k += t * k_stride;  // this query's keys (0: keys shared by all queries)
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
                   int64_t Di, int64_t L, float* scores) {
  if (Hi <= 0 || Di <= 0 || Di % 2 || Hi > 128 || Di > 512)
    throw InputError("cuda::indexer_scores: not supported: " + std::to_string(Hi) + " heads x " + std::to_string(Di));
  if (T == 0 || L == 0) return;
  const size_t smem = (size_t)(Hi + kKeys) * (Di + 2) * sizeof(In) + Hi * 4 + 16;
  if (smem > 99 * 1024) throw InputError("cuda::indexer_scores: not supported: shared memory for " + std::to_string(Hi) + " heads x " + std::to_string(Di));
  MLACONF_CUDA_CHECK(cudaFuncSetAttribute(indexer_scores_kernel<In>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  dim3 grid(ceil_div(L, kKeys), (unsigned)T);
  indexer_scores_kernel<In><<<grid, kScoreThreads, smem>>>(q, k, k_stride, w, qpos, (int)Hi, (int)Di, L, scores);
  MLACONF_CUDA_LAUNCH_CHECK("indexer_scores_kernel");
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
      float tA = 0.f, tB = 0.f;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        tA = fmaf(wv[n][0], fmaxf(acc[n][0], 0.f), tA);
        tA = fmaf(wv[n][1], fmaxf(acc[n][1], 0.f), tA);
        tB = fmaf(wv[n][0], fmaxf(acc[n][2], 0.f), tB);
        tB = fmaf(wv[n][1], fmaxf(acc[n][3], 0.f), tB);
      }
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
  if (Hi == 32) indexer_scores_mma<4><<<grid, 256>>>(q, k, k_stride, w, qpos, L, scores);
  else indexer_scores_mma<8><<<grid, 256>>>(q, k, k_stride, w, qpos, L, scores);
  MLACONF_CUDA_LAUNCH_CHECK("indexer_scores_mma");
  return true;
}

constexpr int kTopkThreads = 1024;

__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// One CTA per row. Radix select of the k-th largest key (4 passes of 8 bits), then one ordered pass
// that keeps every key above it and the lowest-index (or, under the fault, highest-index) equal ones.
__global__ void __launch_bounds__(kTopkThreads) topk_kernel(const float* scores, int64_t L, int k, bool upper_tie, int32_t* out) {
  using Scan = cub::BlockScan<int, kTopkThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int hist[256];
  __shared__ int s_valid, s_bucket, s_remaining, s_run_eq, s_run_take;
  const float* row = scores + (int64_t)blockIdx.x * L;
  int32_t* orow = out + (int64_t)blockIdx.x * k;
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
  launch_scores(d_q, d_k, 0, d_w, d_qpos, T, Hi, Di, L, d_scores);
}

void topk_rows(const float* d_scores, int64_t T, int64_t L, int64_t k, int32_t* d_out) {
  if (k <= 0 || k > INT32_MAX || L < 0) throw InputError("cuda::topk_rows: bad k or L");
  if (T == 0) return;
  topk_kernel<<<(unsigned)T, kTopkThreads>>>(d_scores, L, (int)k, active_fault() == Fault::TopkUpperTie, d_out);
  MLACONF_CUDA_LAUNCH_CHECK("topk_kernel");
}

}  // namespace mlaconf::cuda
