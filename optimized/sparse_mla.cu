// mlaconf optimized: sparse MLA in the absorbed form (decode and prefill share one kernel): the dispatch, and the
// tensor-core kernel for GLM-5's and DeepSeek V3.2's d_qk = 576, d_v = 512 (other sizes: sparse_mla_simt.cu).
//
// One latent cache row (d_qk f16: [c | k_pe]) serves every head (MQA), so a CTA takes the heads of one query and
// one split of its index list, gathers the listed rows into shared memory, keeps an online softmax per head
// (base-2 exponent) and accumulates the first d_v values of each row; splits are merged with the log-sum-exp
// rule. Index -1 is "no token"; a head with no valid token ends with zeros.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"
#include "optimized/faults.h"
#include "optimized/mma.cuh"
#include "optimized/sparse_mla_list.cuh"

namespace mlaconf::cuda {
namespace {

using mla::kMaxDqk;
using mla::kMaxDv;
using mla::list_params;
using mla::ListParams;

// ---- tensor-core kernels for d_qk = 576, d_v = 512 ------------------------------------------------
// sparse_mla_rows (16 or 32 heads per CTA) reads the split's rows (validated; -1 = none) into shared memory once,
// up front, so that no gather waits on an index load; takes P rounded to fp16 for the P . V product, the
// normaliser summing the rounded P so that the weights stay consistent, with fp32 accumulation throughout; and
// ends a split with finish_split.
constexpr int kMmaDqk = 576, kMmaDv = 512;
constexpr int kTileRows = 16;
constexpr int kLdk = kMmaDqk + 8;       // halves per shared row: 1168 bytes, ldmatrix rows hit distinct banks
constexpr int kNPart = kMmaDv / 4;      // 128 = 16 n8 tiles per warp
constexpr int kChunks = kMmaDqk / 8;    // 16-byte chunks per row
constexpr int kFusedMaxSplits = 4;      // up to this many splits the last CTA merges (it reads them all)
constexpr int kMaxAutoSplits = 16;
constexpr int kMaxSplitRows = 2048;     // a split's rows sit in shared memory (8 KB at most)
constexpr float kLazyLog2 = 8.f;        // the running max lags the true one by at most 2^8 (see the softmax)


struct MmaParams : ListParams {
  bool plain_sum;
  float* out;     // [T, H, dv]
  int* tickets;   // [T, head blocks], zero between launches (the merging CTA resets its own)
  bool fused_merge;  // the last CTA of a (query, head block) merges; else sparse_mla_mma_merge does
};

// The split's rows into shared memory, validated (-1 = none; slots from n_rows up to `slots` too), with
// all index loads of a thread in flight at once, so that no gather waits on an index load.
template <int kThreadsM>
__device__ __forceinline__ void load_split_rows(const ListParams& p, int t, int begin, int n_rows, int slots, int* rows_s) {
  const int tid = threadIdx.x;
  constexpr int kPer = (kMaxSplitRows + kThreadsM - 1) / kThreadsM;
  int v[kPer];
  if (p.dense) {
    const int64_t base = p.row_base ? (int64_t)p.row_base[t] : 0;
    const int64_t limit = p.q_pos ? (int64_t)p.q_pos[t] : p.L - 1;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int e = tid + j * kThreadsM;
      v[j] = (e < n_rows && begin + e <= limit && base + begin + e < p.L) ? (int)(base + begin + e) : -1;
    }
  } else {
    const int32_t* list = p.idx + (int64_t)t * p.top_k + begin;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int e = tid + j * kThreadsM;
      v[j] = e < n_rows ? __ldg(list + e) : -1;
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) v[j] = (v[j] >= 0 && v[j] < p.L) ? v[j] : -1;
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j)
    if (tid + j * kThreadsM < slots) rows_s[tid + j * kThreadsM] = v[j];
}

// Lazy rescaling, given the tile's max of this thread's two heads: the running max moves only when the
// tile's max exceeds it by more than kLazyLog2, so that the accumulators are rescaled on few tiles (the
// common case skips the multiplications, warp-uniformly). Until then P = 2^(s - m) <= 2^kLazyLog2, far
// inside fp16's range, and the sum and the merge use the same max as P did: the same softmax.
__device__ __forceinline__ void lazy_rescale(float mxA, float mxB, float& mA, float& mB, float& lA, float& lB,
                                             float (&acc)[kNPart / 8][4]) {
  const bool upA = mxA > mA + kLazyLog2, upB = mxB > mB + kLazyLog2;  // mA = -inf: any valid score moves it
  if (__any_sync(0xffffffffu, upA || upB)) {
    const float aA = upA ? exp2f(mA - mxA) : 1.f, aB = upB ? exp2f(mB - mxB) : 1.f;  // exp2(-inf) = 0
    if (upA) mA = mxA;
    if (upB) mB = mxB;
    lA *= aA;
    lB *= aB;
#pragma unroll
    for (int n = 0; n < kNPart / 8; ++n) {
      acc[n][0] *= aA, acc[n][1] *= aA;
      acc[n][2] *= aB, acc[n][3] *= aB;
    }
  }
}

// The end of a split, for the thread holding O[hA | hB, col0 + 8n + {0, 1}] (n < 16) with the heads'
// final max and sum (every thread of a head holds the same ones; `writer` writes them). One split:
// normalise and write out. Several: write the partial; the last CTA of the (query, head block), by
// ticket, merges them all when p.fused_merge (w_s: 2 x kHeadsCta floats of shared memory).
template <int kThreadsM, int kHeadsCta>
__device__ __forceinline__ void finish_split(const MmaParams& p, const float (&acc)[kNPart / 8][4], float mA, float mB, float lA,
                                             float lB, int hA, int hB, int col0, bool writer, int t, int split, int head_block,
                                             float* w_s) {
  const int tid = threadIdx.x;
  if (p.n_splits == 1) {
    const float iA = lA > 0.f ? 1.f / lA : 0.f, iB = lB > 0.f ? 1.f / lB : 0.f;
#pragma unroll
    for (int n = 0; n < kNPart / 8; ++n) {
      if (hA < p.H)
        *reinterpret_cast<float2*>(p.out + ((int64_t)t * p.H + hA) * kMmaDv + col0 + 8 * n) = make_float2(acc[n][0] * iA, acc[n][1] * iA);
      if (hB < p.H)
        *reinterpret_cast<float2*>(p.out + ((int64_t)t * p.H + hB) * kMmaDv + col0 + 8 * n) = make_float2(acc[n][2] * iB, acc[n][3] * iB);
    }
    return;
  }
  const int64_t pbase = ((int64_t)t * p.n_splits + split) * p.H;
#pragma unroll
  for (int n = 0; n < kNPart / 8; ++n) {
    if (hA < p.H) *reinterpret_cast<float2*>(p.o_part + (pbase + hA) * kMmaDv + col0 + 8 * n) = make_float2(acc[n][0], acc[n][1]);
    if (hB < p.H) *reinterpret_cast<float2*>(p.o_part + (pbase + hB) * kMmaDv + col0 + 8 * n) = make_float2(acc[n][2], acc[n][3]);
  }
  if (writer) {
    if (hA < p.H) p.m_part[pbase + hA] = mA, p.l_part[pbase + hA] = lA;
    if (hB < p.H) p.m_part[pbase + hB] = mB, p.l_part[pbase + hB] = lB;
  }
  if (!p.fused_merge) return;
  __threadfence();
  __syncthreads();
  __shared__ int last;
  int* ticket = p.tickets + (int64_t)t * gridDim.y + blockIdx.y;
  if (tid == 0) last = atomicAdd(ticket, 1) == p.n_splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int nh = min(kHeadsCta, p.H - head_block);
  for (int h = tid; h < nh; h += kThreadsM) {  // w_s: [kHeadsCta] max, [kHeadsCta] 1 / sum
    float M = -INFINITY, Ls = 0.f;
    for (int sp = 0; sp < p.n_splits; ++sp) M = fmaxf(M, __ldcg(p.m_part + ((int64_t)t * p.n_splits + sp) * p.H + head_block + h));
    for (int sp = 0; sp < p.n_splits; ++sp) {
      const int64_t k = ((int64_t)t * p.n_splits + sp) * p.H + head_block + h;
      const float m = __ldcg(p.m_part + k);
      Ls += (p.plain_sum ? 1.f : (m == -INFINITY ? 0.f : exp2f(m - M))) * __ldcg(p.l_part + k);
    }
    w_s[h] = M;
    w_s[kHeadsCta + h] = (M == -INFINITY || Ls == 0.f) ? 0.f : 1.f / Ls;
  }
  __syncthreads();
  for (int e = tid; e < nh * (kMmaDv / 4); e += kThreadsM) {
    const int h = e / (kMmaDv / 4), c = (e - h * (kMmaDv / 4)) * 4;
    const float M = w_s[h];
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int sp = 0; sp < p.n_splits; ++sp) {
      const int64_t k = ((int64_t)t * p.n_splits + sp) * p.H + head_block + h;
      const float m = __ldcg(p.m_part + k);
      const float wgt = p.plain_sum ? 1.f : (m == -INFINITY ? 0.f : exp2f(m - M));
      if (wgt != 0.f) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(p.o_part + k * kMmaDv + c));
        o.x += wgt * v.x, o.y += wgt * v.y, o.z += wgt * v.z, o.w += wgt * v.w;
      }
    }
    const float inv = w_s[kHeadsCta + h];
    *reinterpret_cast<float4*>(p.out + ((int64_t)t * p.H + head_block + h) * kMmaDv + c) =
        make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
  }
  if (tid == 0) *ticket = 0;  // ready for the next launch
}

// ---- 16 or 32 heads per CTA, rows split over the warps (d_qk = 576, d_v = 512) ------------------------
// A CTA holds G groups of 16 heads of one query (G = 1: 16 heads, 4 warps; G = 2: 32 heads, 8 warps) and
// one split of its list. Warp w of a group computes S for the group's 16 heads over all 576 dims, for
// rows 8w..8w+7 of each 32-row tile (Q's A fragments for the whole 576 dims stay in registers), so no
// warp repeats another's softmax and no partial scores are exchanged: a group's warps share only the
// tile's max per head (64 floats) and P in fp16 (1 KB), which every warp then multiplies with its
// quarter of the values, O[16 heads, 128w..128w+127] += P[16, 32] . V[32, 128w..]. Two stages: tile
// i + 1 is gathered while tile i is computed, one bulk copy per row completing on the stage's mbarrier,
// instead of 2304 16-byte cp.async per tile that crowd the memory pipeline ahead of the ldmatrix loads.
// A bulk copy takes uniform operands, so a warp's copies issue one lane at a time: spread over the
// CTA's 4 G warps, that is 8 / G each. G = 2 gathers each row once for 32 heads: a query's rows cross
// L2 twice instead of 4 times (64 heads), with half the copies per warp.
constexpr int kRowsTile = 32;
constexpr int kRowsStages = 2;
constexpr int kPLd = kRowsTile + 8;  // halves per P row: 80 bytes, ldmatrix rows hit distinct banks

template <int G>
constexpr size_t rows_smem_bytes(int split) {
  return (size_t)kRowsStages * kRowsTile * kLdk * 2 + (size_t)G * 16 * kPLd * 2 + G * 64 * 4 + round_up(split, kRowsTile) * 4;
}

// A barrier of group gi's 4 warps (G = 1: the CTA's). Immediate ids, so that ptxas counts the barriers the
// kernel uses (a register id reserves all 16).
template <int G>
__device__ __forceinline__ void group_sync(int gi) {
  if constexpr (G == 1) __syncthreads();
  else if (gi == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory");
  else asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

// S[16 heads, 8 rows] of a warp's 8 rows of the tile (K at k_addr, this lane's ldmatrix address), in the log2
// domain and -inf at missing rows (rows: the lane's two row slots, row or -1), and the maxima of the thread's
// two heads over those rows. s[0], s[1]: head g, rows 8w + 2tq + {0, 1}; s[2], s[3]: head g + 8, the same rows.
// Two accumulators (even and odd k steps) halve the dependent HMMA chain.
__device__ __forceinline__ void tile_scores(const uint32_t (&qa)[kMmaDqk / 16][4], uint32_t k_addr, const int* rows, float scale_log2,
                                            float (&s)[4], float& mxA, float& mxB) {
  float s2[4] = {0.f, 0.f, 0.f, 0.f};
  s[0] = s[1] = s[2] = s[3] = 0.f;
#pragma unroll
  for (int j = 0; j < kMmaDqk / 32; ++j) {
    uint32_t b[4];
    ldmatrix_x4(b, k_addr + j * 64);
    mma_16816(s, qa[2 * j], b[0], b[1]);
    mma_16816(s2, qa[2 * j + 1], b[2], b[3]);
  }
  mxA = -INFINITY, mxB = -INFINITY;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const bool ok = rows[j] >= 0;
    s[j] = ok ? (s[j] + s2[j]) * scale_log2 : -INFINITY;
    s[2 + j] = ok ? (s[2 + j] + s2[2 + j]) * scale_log2 : -INFINITY;
    mxA = fmaxf(mxA, s[j]);
    mxB = fmaxf(mxB, s[2 + j]);
  }
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    mxA = fmaxf(mxA, __shfl_xor_sync(0xffffffffu, mxA, o));
    mxB = fmaxf(mxB, __shfl_xor_sync(0xffffffffu, mxB, o));
  }
}

// The sums of P of the thread's two heads over every row: over the quad's rows, then over the group's 4 warps in
// a fixed order (all warps hold the same), through mx_g once the last tile's maxima are read.
__device__ __forceinline__ void group_sums(float& lA, float& lB, float* mx_g, int warp, int g, int tq) {
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    lA += __shfl_xor_sync(0xffffffffu, lA, o);
    lB += __shfl_xor_sync(0xffffffffu, lB, o);
  }
  __syncthreads();  // the last tile's maxima are read
  if (tq == 0) mx_g[warp * 16 + g] = lA, mx_g[warp * 16 + g + 8] = lB;
  __syncthreads();
  lA = (mx_g[g] + mx_g[16 + g]) + (mx_g[32 + g] + mx_g[48 + g]);
  lB = (mx_g[8 + g] + mx_g[24 + g]) + (mx_g[40 + g] + mx_g[56 + g]);
}

template <int G>
__global__ void __launch_bounds__(128 * G, 2 / G) sparse_mla_rows(MmaParams p) {
  static_assert(G == 1 || G == 2, "16 or 32 heads per CTA");
  constexpr int kThreadsG = 128 * G, kCopyRows = 8 / G;  // rows a warp copies per tile
  pdl_trigger();  // the merge kernel may launch now (it waits for us)
  extern __shared__ __align__(16) unsigned char smem[];
  __half* k_s = reinterpret_cast<__half*>(smem);               // [kRowsStages][kRowsTile][kLdk]
  __half* p_s = k_s + kRowsStages * kRowsTile * kLdk;           // [G][16 heads][kPLd]: P of the tile, fp16
  float* mx_s = reinterpret_cast<float*>(p_s + G * 16 * kPLd);  // [G][4 warps][16 heads]: tile max, then sums
  int* rows_s = reinterpret_cast<int*>(mx_s + G * 64);          // [split rounded to tiles]: row or -1

  const int split = blockIdx.x, t = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, cw = tid >> 5;  // cw: the warp in the CTA
  const int gi = cw >> 2, warp = cw & 3;                        // its head group, and its place in the group
  const int g = lane >> 2, tq = lane & 3;
  const int head_block = blockIdx.y * 16 * G;
  const int hA = head_block + 16 * gi + g, hB = hA + 8;  // this thread's two heads (fragment rows g, g+8)
  p_s += gi * 16 * kPLd;
  float* mx_g = mx_s + gi * 64;

  const int begin = split * p.split, n_rows = min(p.split, p.entries - begin);
  const int n_tiles = (n_rows + kRowsTile - 1) / kRowsTile;
  __shared__ uint64_t full[kRowsStages];  // stage s holds tile i (i % kRowsStages == s) after phase i / kRowsStages
  if (tid == 0) {
    for (int st = 0; st < kRowsStages; ++st) mbar_init(&full[st], 4 * G);  // one arrival per warp
    fence_mbar_init();  // the initialised barriers, visible to the bulk copies (async proxy) too
  }
  // Q of the 16 G heads (zeros past H) into the last stage, which tile 1 overwrites only after the loop's
  // first barrier: 16-byte copies here and ldmatrix below instead of 144 scattered 4-byte loads per thread.
  static_assert(16 * G <= kRowsTile, "Q fits a stage");
  __half* q_s = k_s + (kRowsStages - 1) * kRowsTile * kLdk;  // [16 G][kLdk]
  for (int c = tid; c < 16 * G * kChunks; c += kThreadsG) {
    const int h = c / kChunks, w = c - h * kChunks;
    const bool ok = head_block + h < p.H;
    cp_async_16(smem_addr(q_s + h * kLdk + w * 8), p.q + ((int64_t)t * p.H + (ok ? head_block + h : 0)) * kMmaDqk + w * 8, ok ? 16 : 0);
  }
  cp_async_commit();
  load_split_rows<kThreadsG>(p, t, begin, n_rows, n_tiles * kRowsTile, rows_s);
  __syncthreads();

  // Gather tile i: lane r < kCopyRows of CTA warp cw copies row slot kCopyRows cw + r. A missing row is
  // zeroed instead (P is 0 there, and 0 times stale bits could be NaN); the fence (a full memory barrier
  // of the thread, so only where it zeroed) orders those writes before the lane's later bulk copies into
  // the same slot. The step's reads of a stage are ordered before its refill by the CTA barrier, as in
  // TMA pipelines.
  auto issue = [&](int i) {
    if (i >= n_tiles) return;
    const int stage = i % kRowsStages;
    const bool mine = lane < kCopyRows;
    __half* dst = k_s + (stage * kRowsTile + cw * kCopyRows + (lane & (kCopyRows - 1))) * kLdk;
    const int row = mine ? rows_s[i * kRowsTile + cw * kCopyRows + lane] : -1;
    if (mine && row < 0) {
      for (int w = 0; w < kChunks; ++w) reinterpret_cast<uint4*>(dst)[w] = make_uint4(0, 0, 0, 0);
      fence_proxy_async();
    }
    const unsigned valid = __ballot_sync(0xffffffffu, row >= 0);
    if (lane == 0) mbar_arrive_expect_tx(&full[stage], (unsigned)__popc(valid) * kMmaDqk * 2);
    __syncwarp();
    if (row >= 0) cp_async_bulk(dst, p.cache + (int64_t)row * kMmaDqk, kMmaDqk * 2, &full[stage]);
  };
  issue(0);

  // ldmatrix lane addresses: matrix mi = lane / 8, row mr = lane % 8.
  const int mi = lane >> 3, mr = lane & 7;
  // Q's A fragments for this thread's two heads and all 576 dims: heads mr + 8 (mi & 1), dims 8 (mi >> 1).
  uint32_t qa[kMmaDqk / 16][4];
  cp_async_wait<0>();
  fence_proxy_async();  // this thread's copies of Q (generic proxy) before tile 1's bulk copies into the same stage
  __syncthreads();      // Q is in shared memory
  {
    const uint32_t q_addr = smem_addr(q_s + (16 * gi + mr + (mi & 1) * 8) * kLdk + (mi >> 1) * 8);
#pragma unroll
    for (int ks = 0; ks < kMmaDqk / 16; ++ks) ldmatrix_x4(qa[ks], q_addr + ks * 32);
  }
  float acc[kNPart / 8][4];
#pragma unroll
  for (int n = 0; n < kNPart / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float mA = -INFINITY, mB = -INFINITY, lA = 0.f, lB = 0.f;  // running max (log2 domain), thread-partial sums

  const uint32_t k_base = smem_addr(k_s);
  // K of this warp's 8 rows, 4 consecutive 8-dim blocks (two k16 steps) per x4.
  const uint32_t qk_off = (uint32_t)(((warp * 8 + mr) * kLdk + mi * 8) * 2);
  // V: rows mr + 8 (mi & 1), values 128w + 8 (mi >> 1).
  const uint32_t pv_off = (uint32_t)(((mr + (mi & 1) * 8) * kLdk + warp * kNPart + (mi >> 1) * 8) * 2);
  // P's A fragments: heads mr + 8 (mi & 1), rows 8 (mi >> 1) of a k16 step.
  const uint32_t p_addr = smem_addr(p_s + (mr + (mi & 1) * 8) * kPLd + (mi >> 1) * 8);

  for (int i = 0; i < n_tiles; ++i) {
    __syncthreads();  // step i - 1 is over: its stage, P and maxima are free
    issue(i + 1);
    mbar_wait(&full[i % kRowsStages], (unsigned)(i / kRowsStages) & 1);  // tile i is in place
    const uint32_t st = k_base + (uint32_t)((i % kRowsStages) * kRowsTile * kLdk * 2);

    float s[4], mxA, mxB;
    tile_scores(qa, st + qk_off, rows_s + i * kRowsTile + warp * 8 + 2 * tq, p.scale_log2, s, mxA, mxB);
    if (tq == 0) mx_g[warp * 16 + g] = mxA, mx_g[warp * 16 + g + 8] = mxB;
    group_sync<G>(gi);  // every warp's maxima are written
    mxA = fmaxf(fmaxf(mx_g[g], mx_g[16 + g]), fmaxf(mx_g[32 + g], mx_g[48 + g]));
    mxB = fmaxf(fmaxf(mx_g[8 + g], mx_g[24 + g]), fmaxf(mx_g[40 + g], mx_g[56 + g]));
    lazy_rescale(mxA, mxB, mA, mB, lA, lB, acc);  // every warp sees the same tile maxima: all decide alike
    const float uA = mA == -INFINITY ? 0.f : mA, uB = mB == -INFINITY ? 0.f : mB;
    const uint32_t pA = pack_half2(exp2f(s[0] - uA), exp2f(s[1] - uA)), pB = pack_half2(exp2f(s[2] - uB), exp2f(s[3] - uB));
    const float2 ra = unpack_half2(pA), rb = unpack_half2(pB);
    lA += ra.x + ra.y;  // the sums of the rounded P, as P . V uses them
    lB += rb.x + rb.y;
    *reinterpret_cast<uint32_t*>(p_s + g * kPLd + warp * 8 + 2 * tq) = pA;
    *reinterpret_cast<uint32_t*>(p_s + (g + 8) * kPLd + warp * 8 + 2 * tq) = pB;
    group_sync<G>(gi);  // P of the whole tile is written
#pragma unroll
    for (int kk = 0; kk < kRowsTile / 16; ++kk) {
      uint32_t pa[4];
      ldmatrix_x4(pa, p_addr + kk * 32);
#pragma unroll
      for (int n = 0; n < kNPart / 16; ++n) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, st + pv_off + (uint32_t)(kk * 16 * kLdk * 2) + n * 32);
        mma_16816(acc[2 * n], pa, b[0], b[1]);
        mma_16816(acc[2 * n + 1], pa, b[2], b[3]);
      }
    }
  }
  group_sums(lA, lB, mx_g, warp, g, tq);
  __syncthreads();  // mx_s is the merge's scratch below
  finish_split<kThreadsG, 16 * G>(p, acc, mA, mB, lA, lB, hA, hB, warp * kNPart + 2 * tq, warp == 0 && tq == 0, t, split,
                                  head_block, mx_s);
}

// The merge for many splits, where one CTA per (query, head block) would read too much: one CTA of
// 128 threads per (head, query), a float4 column each. Launched as a programmatic dependent of the split
// kernel, which lets it launch at once: it waits here for that kernel's completion and memory, not for its
// own launch. Up to kMaxAutoSplits splits (the automatic split's most) every load of the thread is issued
// before any is used, one latency from L2: a loop whose weighted sums sat behind a per-split branch kept
// the partials' loads in it (sm_90 SASS: 4-5 dependent rounds of LDG.128 for 16 splits), and in the B = 1 decode
// step the merge ended ~4.4 us after the split kernel (H200 trace, docs/perf/h200-2026-12-03.md). The same sums in the same
// order either way.
__global__ void __launch_bounds__(128) sparse_mla_mma_merge(const float* __restrict__ o_part, const float* __restrict__ m_part,
                                                            const float* __restrict__ l_part, int n_splits, int H,
                                                            bool plain_sum, float* __restrict__ out) {
  pdl_wait();  // a no-op when launched without the dependency
  const int h = blockIdx.x, t = blockIdx.y, c = threadIdx.x * 4;
  const int64_t k0 = (int64_t)t * n_splits * H + h;  // split s at k0 + s H
  float M = -INFINITY, Ls = 0.f;
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
  // Split s's weight and its terms, in split order.
  auto add = [&](float m, float l, float4 v) {
    const float w = plain_sum ? 1.f : (m == -INFINITY ? 0.f : exp2f(m - M));
    Ls += w * l;
    if (w != 0.f) o.x += w * v.x, o.y += w * v.y, o.z += w * v.z, o.w += w * v.w;
  };
  if (n_splits <= kMaxAutoSplits) {
    float m[kMaxAutoSplits], l[kMaxAutoSplits];
    float4 v[kMaxAutoSplits];
#pragma unroll
    for (int s = 0; s < kMaxAutoSplits; ++s) {
      if (s >= n_splits) break;
      const int64_t k = k0 + (int64_t)s * H;
      m[s] = m_part[k], l[s] = l_part[k];
      v[s] = *reinterpret_cast<const float4*>(o_part + k * kMmaDv + c);
    }
#pragma unroll
    for (int s = 0; s < kMaxAutoSplits; ++s)
      if (s < n_splits) M = fmaxf(M, m[s]);
#pragma unroll
    for (int s = 0; s < kMaxAutoSplits; ++s)
      if (s < n_splits) add(m[s], l[s], v[s]);
  } else {
    for (int s = 0; s < n_splits; ++s) M = fmaxf(M, m_part[k0 + (int64_t)s * H]);
#pragma unroll 16
    for (int s = 0; s < n_splits; ++s) {
      const int64_t k = k0 + (int64_t)s * H;
      add(m_part[k], l_part[k], *reinterpret_cast<const float4*>(o_part + k * kMmaDv + c));
    }
  }
  const float inv = (M == -INFINITY || Ls == 0.f) ? 0.f : 1.f / Ls;
  *reinterpret_cast<float4*>(out + ((int64_t)t * H + h) * kMmaDv + c) = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
}


// Zeroed ticket counters, grown on demand (each launch leaves them zero again); one set per device
// (the layer split runs stages on several devices).
int* tickets(size_t n) {
  static DeviceBuffer bufs[64];
  DeviceBuffer& buf = bufs[current_device() & 63];
  if (buf.bytes() < n * 4) {
    buf = DeviceBuffer();
    buf = DeviceBuffer(std::max<size_t>(n * 4, 4096));
    buf.fill(0);
    bump_workspace_generation();
  }
  return buf.as<int>();
}

template <int HG>
void launch_mma(const SparseMlaArgs& a, bool dense, int64_t entries) {
  const int sms = device_sm_count();
  const int64_t head_blocks = (a.H + 16 * HG - 1) / (16 * HG);
  const int64_t ctas = head_blocks * (a.plan_queries > 0 ? a.plan_queries : a.T);  // the plan's query count
  const int64_t resident = (int64_t)sms * (HG == 1 ? 2 : 1);
  // Split only where the queries alone leave the device idle, never into more than one wave, and into
  // at most kMaxAutoSplits: each split writes a 2 KB fp32 partial per head, as many bytes as 1.8 rows.
  int64_t split;
  if (a.split > 0) {
    split = a.split;
  } else {
    const int64_t want = std::clamp<int64_t>(resident / ctas, 1, kMaxAutoSplits);
    split = (entries + want - 1) / want;
  }
  split = std::clamp<int64_t>((int64_t)round_up((size_t)split, kTileRows), kTileRows, kMaxSplitRows);
  const int64_t n_splits = entries == 0 ? 1 : (entries + split - 1) / split;
  MmaParams p{};
  static_cast<ListParams&>(p) = list_params(a, dense, entries, split, n_splits, n_splits > 1, kMmaDv);
  p.plain_sum = active_fault() == Fault::NoLseMerge;
  p.out = a.out;
  if (n_splits > 1) {
    p.fused_merge = n_splits <= kFusedMaxSplits;
    if (p.fused_merge) p.tickets = tickets((size_t)(head_blocks * a.T));  // one per (query, head block) launched
  }
  // 16 or 32 heads per CTA: sparse_mla_rows<HG>.
  constexpr size_t smem_max = rows_smem_bytes<HG>(kMaxSplitRows);
  static_assert(smem_max <= 99 * 1024, "sparse MLA tile must fit sm_120's 99 KB");
  const size_t smem = rows_smem_bytes<HG>((int)split);
  void (*kernel)(MmaParams) = sparse_mla_rows<HG>;
  static bool attr_set[64] = {};  // one attribute call per device and instantiation (the attribute is per device)
  if (!attr_set[current_device() & 63]) {
    MLACONF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_max));
    attr_set[current_device() & 63] = true;
  }
  const dim3 grid((unsigned)n_splits, (unsigned)head_blocks, (unsigned)a.T);
  kernel<<<grid, HG * 128, smem, cur_stream()>>>(p);
  MLACONF_CUDA_LAUNCH_CHECK("sparse_mla_rows");
  if (n_splits > 1 && !p.fused_merge) {
    // Programmatic dependent launch: the merge's launch overlaps the split kernel (sm_90 and later).
    launch_dependent(sparse_mla_mma_merge, dim3((unsigned)a.H, (unsigned)a.T), dim3(kMmaDv / 4), 0, (const float*)p.o_part,
                     (const float*)p.m_part, (const float*)p.l_part, (int)n_splits, p.H, p.plain_sum, a.out);
    MLACONF_CUDA_LAUNCH_CHECK("sparse_mla_mma_merge");
  }
}

}  // namespace

void sparse_mla(const SparseMlaArgs& a) {
  if (a.T < 0 || a.H <= 0 || a.d_qk <= 0 || a.d_v <= 0 || a.top_k < 0 || a.L < 0)
    throw InputError("cuda::sparse_mla: negative or zero dimension");
  if (a.d_qk % 2 || a.d_v % 2 || a.d_v > a.d_qk || a.d_qk > kMaxDqk || a.d_v > kMaxDv)
    throw NotSupported("cuda::sparse_mla: d_qk " + std::to_string(a.d_qk) + ", d_v " + std::to_string(a.d_v) +
                     " (need even, d_v <= d_qk <= 1024, d_v <= 512)");
  if (a.T == 0) return;
  const bool dense = active_fault() == Fault::DenseAttention;
  if (a.L > INT32_MAX && dense) throw InputError("cuda::sparse_mla: dense fault needs L < 2^31");
  const int64_t entries = dense ? a.L : a.top_k;
  if (a.T > 65535) throw NotSupported("cuda::sparse_mla: more than 65535 queries in one call");
  if (a.heads_per_cta != 0 && a.heads_per_cta != 16 && a.heads_per_cta != 32)
    throw InputError("cuda::sparse_mla: heads_per_cta must be 0, 16 or 32");
  // The tensor-core kernel copies 16-byte pieces of rows: it needs a 16-byte aligned cache.
  if (a.d_qk == kMmaDqk && a.d_v == kMmaDv && reinterpret_cast<uintptr_t>(a.cache) % 16 == 0) {
    // 32 heads per CTA from plans of 8 queries (a row gathered once for two head groups: B = 8 / 32 / 64
    // -8 / -13 / -17 %), 16 below (B = 1: 15.9 against 17.7 us; H200, docs/perf/h200-2026-12-02.md). The two give the
    // same bits at the same split, and the automatic split is the same for both (half the CTAs, half the
    // resident places), so the choice never changes a result. (A kernel of 64 heads per CTA, with the score
    // exchange and the softmax repeated by the 4 warps of a head group, was slower at every batch measured and
    // was removed; docs/perf/h200-2026-12-01.md, v6.)
    const int64_t plan = a.plan_queries > 0 ? a.plan_queries : a.T;
    const int hpc = a.heads_per_cta != 0 ? a.heads_per_cta : plan >= 8 ? 32 : 16;
    if (hpc == 32) launch_mma<2>(a, dense, entries);
    else launch_mma<1>(a, dense, entries);
    return;
  }
  mla::sparse_mla_simt(a, dense, entries);
}

}  // namespace mlaconf::cuda
