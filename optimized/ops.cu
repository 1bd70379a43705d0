// mlaconf optimized: the row-wise and elementwise operations (norms, RoPE, SiLU gate, casts, checks).
#include <cuda_fp16.h>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"

namespace mlaconf::cuda {
namespace {

__device__ __forceinline__ float block_sum(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = 0.f;
  for (int i = 0; i < nw; ++i) s += red[i];
  return s;
}

// RMSNorm, one CTA per row, optionally fused with the residual add before it (x += delta, written back,
// then normalized: the same bits as add_inplace then rmsnorm). Why not 256 threads over scalars: a
// decode step normalizes one row, and a CTA looping 24 times over dependent scalar loads waited ~13 us
// on memory latency. Here each thread takes whole 4-value chunks (16-byte loads where VEC), about one
// per thread, all loaded at once (kNormHeld), so a row costs one round trip. The sum of squares runs per
// thread over its chunks in order, then block_sum: an order fixed by D alone (norm_threads), never by T
// or the alignment (the scalar variant reads the same chunks element by element, zero-padding the last
// one).
template <bool VEC>
__device__ __forceinline__ float4 ld_chunk(const float* p, int64_t c0, int64_t D) {
  if constexpr (VEC) return *reinterpret_cast<const float4*>(p + c0);
  float4 v;
  v.x = c0 < D ? p[c0] : 0.f, v.y = c0 + 1 < D ? p[c0 + 1] : 0.f, v.z = c0 + 2 < D ? p[c0 + 2] : 0.f;
  v.w = c0 + 3 < D ? p[c0 + 3] : 0.f;
  return v;
}
template <bool VEC>
__device__ __forceinline__ void st_chunk(float* p, int64_t c0, int64_t D, float4 v) {
  if constexpr (VEC) {
    *reinterpret_cast<float4*>(p + c0) = v;
  } else {
    if (c0 < D) p[c0] = v.x;
    if (c0 + 1 < D) p[c0 + 1] = v.y;
    if (c0 + 2 < D) p[c0 + 2] = v.z;
    if (c0 + 3 < D) p[c0 + 3] = v.w;
  }
}
// Chunks a thread of rmsnorm_kernel keeps in registers from its loads to its stores (rows of up to 4 x its threads
// chunks: 16384 values at 1024 threads): x and w are read once, all before the sum, instead of x read again and w
// after it (a second L2 round trip in a one-CTA kernel on the decode step's critical path, 13 times a step).
constexpr int kNormHeld = 4;
// rmsnorm_kernel's arithmetic per chunk, one piece of code for both of its paths (their bits must agree): the residual
// add, the sum of squares in value order, the output g (v r).
__device__ __forceinline__ float4 add_chunk(float4 v, float4 d) { return make_float4(v.x + d.x, v.y + d.y, v.z + d.z, v.w + d.w); }
__device__ __forceinline__ float sum_sq(float4 v, float ss) {
  return fmaf(v.w, v.w, fmaf(v.z, v.z, fmaf(v.y, v.y, fmaf(v.x, v.x, ss))));
}
__device__ __forceinline__ float4 norm_chunk(float4 g, float4 v, float r) {
  return make_float4(g.x * (v.x * r), g.y * (v.y * r), g.z * (v.z * r), g.w * (v.w * r));
}
template <bool VEC>
__global__ void rmsnorm_kernel(float* x, const float* delta, const float* w, int64_t D, int64_t ld, float eps, float* y) {
  __shared__ float red[32];
  pdl_trigger();  // a chained GEMV's x split may launch (it waits for this kernel): common.cuh
  float* xr = x + blockIdx.x * ld;
  float* yr = y + blockIdx.x * ld;
  const int64_t chunks = (D + 3) / 4;
  float ss = 0.f;
  if (chunks <= kNormHeld * (int64_t)blockDim.x) {
    // Every load before any store (the pointers may alias, so the compiler keeps stores and later loads in order).
    float4 v[kNormHeld], g[kNormHeld], d[kNormHeld];
#pragma unroll
    for (int i = 0; i < kNormHeld; ++i) {
      const int64_t j = threadIdx.x + (int64_t)i * blockDim.x;
      if (j >= chunks) break;
      v[i] = ld_chunk<VEC>(xr, 4 * j, D);
      g[i] = ld_chunk<VEC>(w, 4 * j, D);
      if (delta) d[i] = ld_chunk<VEC>(delta + blockIdx.x * ld, 4 * j, D);
    }
#pragma unroll
    for (int i = 0; i < kNormHeld; ++i) {
      const int64_t j = threadIdx.x + (int64_t)i * blockDim.x;
      if (j >= chunks) break;
      if (delta) {
        v[i] = add_chunk(v[i], d[i]);
        st_chunk<VEC>(xr, 4 * j, D, v[i]);
      }
      ss = sum_sq(v[i], ss);
    }
    const float r = rsqrtf(block_sum(ss, red) / (float)D + eps);
#pragma unroll
    for (int i = 0; i < kNormHeld; ++i) {
      const int64_t j = threadIdx.x + (int64_t)i * blockDim.x;
      if (j >= chunks) break;
      st_chunk<VEC>(yr, 4 * j, D, norm_chunk(g[i], v[i], r));
    }
    return;
  }
#pragma unroll 4
  for (int64_t j = threadIdx.x; j < chunks; j += blockDim.x) {
    float4 v = ld_chunk<VEC>(xr, 4 * j, D);
    if (delta) {
      v = add_chunk(v, ld_chunk<VEC>(delta + blockIdx.x * ld, 4 * j, D));
      st_chunk<VEC>(xr, 4 * j, D, v);
    }
    ss = sum_sq(v, ss);
  }
  const float r = rsqrtf(block_sum(ss, red) / (float)D + eps);
#pragma unroll 4
  for (int64_t j = threadIdx.x; j < chunks; j += blockDim.x) {
    const float4 v = ld_chunk<VEC>(xr, 4 * j, D), g = ld_chunk<VEC>(w, 4 * j, D);
    st_chunk<VEC>(yr, 4 * j, D, norm_chunk(g, v, r));
  }
}
// Threads of a norm CTA, from the row length alone (it fixes the summation order): one 4-value chunk
// per thread up to 1024 threads.
int norm_threads(int64_t D) { return (int)std::min<int64_t>(1024, std::max<int64_t>(32, ((D + 3) / 4 + 31) / 32 * 32)); }
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Row xr (D values) layer-normalized into yr (global or shared memory) by the CTA's threads: the sum, then the sum of
// squared deviations, each in order per thread and then by block_sum, so the bits depend on D and blockDim alone.
// The one layernorm of layernorm_kernel and layernorm_rope_kernel.
__device__ __forceinline__ void layernorm_row(const float* xr, const float* w, const float* b, int64_t D, float eps, float* red,
                                              float* yr) {
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s, red) / (float)D;
  float v = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) v = fmaf(xr[i] - mean, xr[i] - mean, v);
  const float r = rsqrtf(block_sum(v, red) / (float)D + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = fmaf(w[i], (xr[i] - mean) * r, b[i]);
}
__global__ void layernorm_kernel(const float* x, const float* w, const float* b, int64_t D, float eps, float* y) {
  __shared__ float red[32];
  layernorm_row(x + blockIdx.x * D, w, b, D, eps, red, y + blockIdx.x * D);
}

// Pair i of a vector's RoPE values (dim of them) at position pos, in place: angle pos theta^(-2i/dim) in double
// (float angles drift ~1e-4 rad at position 4096). The one rotation of rope_kernel and layernorm_rope_kernel.
__device__ __forceinline__ void rope_pair(float* v, int64_t i, int64_t dim, int32_t pos, double theta, bool neox) {
  const int64_t half = dim / 2;
  const double inv = pow(theta, -2.0 * (double)i / (double)dim);
  double sn, cs;
  sincos((double)pos * inv, &sn, &cs);
  const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  const float x0 = v[a], x1 = v[b];
  v[a] = (float)(x0 * cs - x1 * sn);
  v[b] = (float)(x0 * sn + x1 * cs);
}

// One thread per (token, vector, pair).
__global__ void rope_kernel(float* x, int64_t T, int64_t n_vec, int64_t stride, int64_t col0, int64_t dim,
                            const int32_t* pos, double theta, bool neox) {
  const int64_t half = dim / 2;
  const int64_t n = T * n_vec * half;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e % half, v = (e / half) % n_vec, t = e / (half * n_vec);
    rope_pair(x + (t * n_vec + v) * stride + col0, i, dim, pos[t], theta, neox);
  }
}

// layernorm_kernel's row (layernorm_row: its bits at the same 128 threads), kept in shared memory,
// then RoPE on values [0, dim) by rope_pair, then written to y and, where idx is set, to dst row idx[t]: the
// indexer's key (layernorm, RoPE, scatter) in one launch instead of three. Why: at one token these are one-CTA
// launches on the indexer's side stream, each costing 2-7 us of launch and latency beside the query path's GEMVs
// (docs/perf/h200-2026-12-02.md). Dynamic shared memory: D floats.
__global__ void layernorm_rope_kernel(const float* x, const float* w, const float* b, int64_t D, float eps, const int32_t* pos,
                                      int64_t dim, double theta, bool neox, float* y, const int32_t* idx, float* dst, int64_t ld_dst) {
  __shared__ float red[32];
  extern __shared__ float row[];
  layernorm_row(x + blockIdx.x * D, w, b, D, eps, red, row);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < dim / 2; i += blockDim.x) rope_pair(row, i, dim, pos[blockIdx.x], theta, neox);
  __syncthreads();
  float* yr = y + blockIdx.x * D;
  float* dr = idx ? dst + (int64_t)idx[blockIdx.x] * ld_dst : nullptr;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    yr[i] = row[i];
    if (dr) dr[i] = row[i];
  }
}

// Elementwise ops: 4 values per thread (16-byte loads where every pointer is aligned), the same
// per-element arithmetic as one value per thread.
__device__ __forceinline__ float silu_mul(float x, float u) { return x / (1.f + expf(-x)) * u; }
__global__ void silu_gate_kernel(const float* g, const float* u, int64_t n, float* out) {
  pdl_trigger();  // the down projection's chained x split may launch (it waits for this kernel)
  const int64_t n4 = n / 4;
  const bool vec = ((reinterpret_cast<uintptr_t>(g) | reinterpret_cast<uintptr_t>(u) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (n + 3) / 4; e += (int64_t)gridDim.x * blockDim.x) {
    if (vec && e < n4) {
      const float4 a = reinterpret_cast<const float4*>(g)[e], b = reinterpret_cast<const float4*>(u)[e];
      reinterpret_cast<float4*>(out)[e] = make_float4(silu_mul(a.x, b.x), silu_mul(a.y, b.y), silu_mul(a.z, b.z), silu_mul(a.w, b.w));
    } else {
      for (int64_t i = 4 * e; i < std::min<int64_t>(4 * e + 4, n); ++i) out[i] = silu_mul(g[i], u[i]);
    }
  }
}

// 4 values per thread: a 16-byte load and an 8-byte store where x and y are aligned.
__global__ void to_half_kernel(const float* x, int64_t n, __half* y) {
  const bool vec = (reinterpret_cast<uintptr_t>(x) & 15) == 0 && (reinterpret_cast<uintptr_t>(y) & 7) == 0;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (n + 3) / 4; e += (int64_t)gridDim.x * blockDim.x) {
    if (vec && e < n / 4) {
      const float4 v = reinterpret_cast<const float4*>(x)[e];
      __half2* o = reinterpret_cast<__half2*>(y + 4 * e);
      o[0] = __halves2half2(__float2half_rn(v.x), __float2half_rn(v.y));
      o[1] = __halves2half2(__float2half_rn(v.z), __float2half_rn(v.w));
    } else {
      for (int64_t i = 4 * e; i < std::min<int64_t>(4 * e + 4, n); ++i) y[i] = __float2half_rn(x[i]);
    }
  }
}

__global__ void split_half_kernel(const float* x, int64_t n, __half* hi, __half* lo) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const __half h = __float2half_rn(x[e]);
    hi[e] = h;
    lo[e] = __float2half_rn(x[e] - __half2float(h));
  }
}

__global__ void nonfinite_kernel(const float* x, int64_t n, unsigned long long* count) {
  unsigned long long c = 0;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
    c += !isfinite(x[e]);
  if (c) atomicAdd(count, c);
}

__global__ void fill_pattern_kernel(uint16_t* x, int64_t rows, int64_t cols, uint64_t seed) {
  const int64_t n = rows * cols;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
    x[e] = pattern_half_bits(seed, e / cols, e % cols);
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  const bool vec = ((reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(x)) & 15) == 0;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (n + 3) / 4; e += (int64_t)gridDim.x * blockDim.x) {
    if (vec && e < n / 4) {
      float4 a = reinterpret_cast<float4*>(y)[e];
      const float4 b = reinterpret_cast<const float4*>(x)[e];
      a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
      reinterpret_cast<float4*>(y)[e] = a;
    } else {
      for (int64_t i = 4 * e; i < std::min<int64_t>(4 * e + 4, n); ++i) y[i] += x[i];
    }
  }
}
__global__ void scale_kernel(float* x, int64_t n, float s) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) x[e] *= s;
}
// grid (rows, column blocks); scatter = false: dst[r] = src[idx[r]]; true: dst[idx[r]] = src[r]. Why a
// 2-D grid of 16-byte copies: one 256-thread CTA per row looped over 6144 scalars (~10 us per call).
// VEC: both rows 16-byte aligned (cols, ld_src, ld_dst multiples of 4 and aligned bases).
template <bool VEC>
__global__ void move_rows_kernel(const float* src, int64_t ld_src, const int32_t* idx, int64_t cols, float* dst,
                                 int64_t ld_dst, bool scatter) {
  const int64_t r = blockIdx.x;
  const int64_t from = scatter ? r : idx[r], to = scatter ? idx[r] : r;
  const int64_t c = 4 * (blockIdx.y * (int64_t)blockDim.x + threadIdx.x);
  const float* s = src + from * ld_src;
  float* d = dst + to * ld_dst;
  if constexpr (VEC) {
    if (c < cols) *reinterpret_cast<float4*>(d + c) = *reinterpret_cast<const float4*>(s + c);
  } else {
    for (int64_t i = c; i < std::min<int64_t>(c + 4, cols); ++i) d[i] = s[i];
  }
}
// out[t] = add[t] + sum_j w[t, j] x[t, j] in the order j = 0..k-1 (fmaf); res (optional) += out.
// grid (T, column blocks), one column per thread, the k loads of a column issued 8 at a time before
// their fmas. (One CTA per token looping over 6144 columns with one load in flight took ~40 us.)
__global__ void combine_kernel(const float* x, const float* w, int64_t k, int64_t E, const float* add, float* out, float* res) {
  const int64_t t = blockIdx.x;
  const int64_t c = blockIdx.y * (int64_t)blockDim.x + threadIdx.x;
  if (c >= E) return;
  float acc = add ? add[t * E + c] : 0.f;
  for (int64_t j0 = 0; j0 < k; j0 += 8) {
    float wv[8], xv[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (j0 + i < k) wv[i] = w[t * k + j0 + i], xv[i] = x[(t * k + j0 + i) * E + c];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (j0 + i < k) acc = fmaf(wv[i], xv[i], acc);
  }
  out[t * E + c] = acc;
  if (res) res[t * E + c] += acc;
}

unsigned grid_for(int64_t n) { return (unsigned)std::min<int64_t>(ceil_div(std::max<int64_t>(n, 1), 256), 4096); }

void rmsnorm_launch(float* d_x, const float* d_delta, const float* d_w, int64_t T, int64_t D, int64_t ld, float eps, float* d_y) {
  const bool vec = D % 4 == 0 && ld % 4 == 0 && aligned16(d_x) && aligned16(d_w) && aligned16(d_y) && (!d_delta || aligned16(d_delta));
  const int nt = norm_threads(D);
  if (vec) rmsnorm_kernel<true><<<(unsigned)T, nt, 0, cur_stream()>>>(d_x, d_delta, d_w, D, ld, eps, d_y);
  else rmsnorm_kernel<false><<<(unsigned)T, nt, 0, cur_stream()>>>(d_x, d_delta, d_w, D, ld, eps, d_y);
  MLACONF_CUDA_LAUNCH_CHECK("rmsnorm_kernel");
}
void move_rows(const float* d_src, int64_t ld_src, const int32_t* d_idx, int64_t n, int64_t cols, float* d_dst, int64_t ld_dst,
               bool scatter) {
  if ((cols + 3) / 4 > 128 * 65535ll) throw InputError("cuda::move_rows: rows too long");
  const bool vec = cols % 4 == 0 && ld_src % 4 == 0 && ld_dst % 4 == 0 && aligned16(d_src) && aligned16(d_dst);
  const dim3 grid((unsigned)n, ceil_div((cols + 3) / 4, 128));
  if (vec) move_rows_kernel<true><<<grid, 128, 0, cur_stream()>>>(d_src, ld_src, d_idx, cols, d_dst, ld_dst, scatter);
  else move_rows_kernel<false><<<grid, 128, 0, cur_stream()>>>(d_src, ld_src, d_idx, cols, d_dst, ld_dst, scatter);
  MLACONF_CUDA_LAUNCH_CHECK("move_rows_kernel");
}

// One CTA per row. Each thread scans its strided values in index order keeping the first of its largest
// (strict >, NaN skipped); the CTA then combines candidates by (larger value, else lower index), so the
// result is the row's first index of its maximum whatever the thread count.
constexpr int kArgmaxThreads = 1024;
__device__ __forceinline__ void argmax_merge(float& v, int& i, float ov, int oi) {
  if (oi >= 0 && (i < 0 || ov > v || (ov == v && oi < i))) v = ov, i = oi;
}
// The warp's best (value, index) candidate, in every lane.
__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    argmax_merge(v, i, ov, oi);
  }
}
__global__ void __launch_bounds__(kArgmaxThreads) argmax_rows_kernel(const float* __restrict__ x, int64_t n, int32_t* __restrict__ out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* row = x + (int64_t)blockIdx.x * n;
  float v = 0.f;
  int i = -1;
  for (int64_t k = threadIdx.x; k < n; k += kArgmaxThreads) {
    const float a = row[k];
    if (!isnan(a) && (i < 0 || a > v)) v = a, i = (int)k;
  }
  warp_argmax(v, i);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sv[warp] = v, si[warp] = i;
  __syncthreads();
  if (warp == 0) {
    v = sv[lane], i = si[lane];
    warp_argmax(v, i);
    if (lane == 0) out[blockIdx.x] = i;
  }
}

// Rows longer than kArgmaxSplitMin (the vocabulary: 154880 logits) over many CTAs. One CTA per row read its
// 620 KB at ~27 GB/s (one SM's memory parallelism: 22.6 us of a 1.21 ms B = 1 step, H200 trace). Pass 1: CTA
// (c, r) scans chunk c of row r (kArgmaxChunk values, every load issued before any is used) and leaves its
// candidate; pass 2: a warp per row merges the chunks' candidates. The merge keeps (larger value, else lower
// index), which does not depend on the order of merging: the same pick as the one-CTA kernel, the row's first
// index of its maximum.
constexpr int kArgmaxSplitThreads = 256, kArgmaxPer = 16;
constexpr int64_t kArgmaxChunk = kArgmaxSplitThreads * kArgmaxPer, kArgmaxSplitMin = 2 * kArgmaxChunk;
struct ArgmaxCand {
  float v;
  int i;
};
__global__ void __launch_bounds__(kArgmaxSplitThreads) argmax_chunks_kernel(const float* __restrict__ x, int64_t n,
                                                                              ArgmaxCand* __restrict__ cand) {
  __shared__ float sv[kArgmaxSplitThreads / 32];
  __shared__ int si[kArgmaxSplitThreads / 32];
  const float* row = x + (int64_t)blockIdx.y * n;
  const int64_t beg = (int64_t)blockIdx.x * kArgmaxChunk;
  float a[kArgmaxPer];
#pragma unroll
  for (int j = 0; j < kArgmaxPer; ++j) {
    const int64_t k = beg + threadIdx.x + (int64_t)j * kArgmaxSplitThreads;
    a[j] = k < n ? __ldg(row + k) : NAN;
  }
  float v = 0.f;
  int i = -1;
#pragma unroll
  for (int j = 0; j < kArgmaxPer; ++j)  // this thread's values in index order: the first of its largest
    if (!isnan(a[j]) && (i < 0 || a[j] > v)) v = a[j], i = (int)(beg + threadIdx.x + j * kArgmaxSplitThreads);
  warp_argmax(v, i);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sv[warp] = v, si[warp] = i;
  __syncthreads();
  if (warp == 0) {
    v = lane < kArgmaxSplitThreads / 32 ? sv[lane] : 0.f;
    i = lane < kArgmaxSplitThreads / 32 ? si[lane] : -1;
    warp_argmax(v, i);
    if (lane == 0) cand[(int64_t)blockIdx.y * gridDim.x + blockIdx.x] = {v, i};
  }
}
__global__ void __launch_bounds__(32) argmax_merge_kernel(const ArgmaxCand* __restrict__ cand, int nc, int32_t* __restrict__ out) {
  const ArgmaxCand* c = cand + (int64_t)blockIdx.x * nc;
  float v = 0.f;
  int i = -1;
  for (int j = threadIdx.x; j < nc; j += 32) argmax_merge(v, i, c[j].v, c[j].i);
  warp_argmax(v, i);
  if (threadIdx.x == 0) out[blockIdx.x] = i;
}

}  // namespace

void rmsnorm(const float* d_x, const float* d_w, int64_t T, int64_t D, int64_t ld, float eps, float* d_y) {
  if (D <= 0 || ld < D) throw InputError("cuda::rmsnorm: bad shape");
  if (T == 0) return;
  rmsnorm_launch(const_cast<float*>(d_x), nullptr, d_w, T, D, ld, eps, d_y);
}
void add_rmsnorm(float* d_h, const float* d_delta, const float* d_w, int64_t T, int64_t D, float eps, float* d_y) {
  if (D <= 0) throw InputError("cuda::add_rmsnorm: bad shape");
  if (T == 0) return;
  rmsnorm_launch(d_h, d_delta, d_w, T, D, D, eps, d_y);
}
void layernorm(const float* d_x, const float* d_w, const float* d_b, int64_t T, int64_t D, float eps, float* d_y) {
  if (D <= 0) throw InputError("cuda::layernorm: bad shape");
  if (T == 0) return;
  layernorm_kernel<<<(unsigned)T, 128, 0, cur_stream()>>>(d_x, d_w, d_b, D, eps, d_y);
  MLACONF_CUDA_LAUNCH_CHECK("layernorm_kernel");
}
void layernorm_rope(const float* d_x, const float* d_w, const float* d_b, int64_t T, int64_t D, float eps, const int32_t* d_pos,
                    int64_t dim, double theta, bool neox, float* d_y, const int32_t* d_idx, float* d_dst, int64_t ld_dst) {
  if (D <= 0 || D > 8192 || dim % 2 || dim > D || (d_idx && ld_dst < D)) throw InputError("cuda::layernorm_rope: bad shape");
  if (T == 0) return;
  layernorm_rope_kernel<<<(unsigned)T, 128, (size_t)D * 4, cur_stream()>>>(d_x, d_w, d_b, D, eps, d_pos, dim, theta, neox, d_y, d_idx,
                                                                          d_dst, ld_dst);
  MLACONF_CUDA_LAUNCH_CHECK("layernorm_rope_kernel");
}
void rope(float* d_x, int64_t T, int64_t n_vec, int64_t stride, int64_t col0, int64_t dim, const int32_t* d_pos,
          double theta, bool neox) {
  if (dim % 2 || col0 + dim > stride) throw InputError("cuda::rope: bad shape");
  if (T == 0) return;
  rope_kernel<<<grid_for(T * n_vec * dim / 2), 256, 0, cur_stream()>>>(d_x, T, n_vec, stride, col0, dim, d_pos, theta, neox);
  MLACONF_CUDA_LAUNCH_CHECK("rope_kernel");
}
void silu_gate(const float* d_gate, const float* d_up, int64_t n, float* d_out) {
  if (n == 0) return;
  silu_gate_kernel<<<grid_for((n + 3) / 4), 256, 0, cur_stream()>>>(d_gate, d_up, n, d_out);
  MLACONF_CUDA_LAUNCH_CHECK("silu_gate_kernel");
}
void argmax_rows(const float* d_x, int64_t rows, int64_t n, int32_t* d_out) {
  if (rows == 0) return;
  if (n > INT32_MAX || rows > 0x7fffffff) throw InputError("cuda::argmax_rows: rows of more than 2^31 values");
  if (n >= kArgmaxSplitMin && rows <= 65535) {
    const int64_t nc = (n + kArgmaxChunk - 1) / kArgmaxChunk;
    auto* cand = static_cast<ArgmaxCand*>(scratch(4, (size_t)(rows * nc) * sizeof(ArgmaxCand)));
    argmax_chunks_kernel<<<dim3((unsigned)nc, (unsigned)rows), kArgmaxSplitThreads, 0, cur_stream()>>>(d_x, n, cand);
    MLACONF_CUDA_LAUNCH_CHECK("argmax_chunks_kernel");
    argmax_merge_kernel<<<(unsigned)rows, 32, 0, cur_stream()>>>(cand, (int)nc, d_out);
    MLACONF_CUDA_LAUNCH_CHECK("argmax_merge_kernel");
    return;
  }
  argmax_rows_kernel<<<(unsigned)rows, kArgmaxThreads, 0, cur_stream()>>>(d_x, n, d_out);
  MLACONF_CUDA_LAUNCH_CHECK("argmax_rows_kernel");
}
__global__ void feed_picks_kernel(const int32_t* __restrict__ picks, int64_t B, int32_t* __restrict__ ids) {
  const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (b < B) ids[b] = picks[b] >= 0 ? picks[b] : 0;
}
void feed_picks(const int32_t* d_picks, int64_t B, int32_t* d_ids) {
  if (B == 0) return;
  feed_picks_kernel<<<(unsigned)ceil_div(B, 256), 256, 0, cur_stream()>>>(d_picks, B, d_ids);
  MLACONF_CUDA_LAUNCH_CHECK("feed_picks_kernel");
}
void to_half(const float* d_x, int64_t n, uint16_t* d_y) {
  if (n == 0) return;
  to_half_kernel<<<grid_for((n + 3) / 4), 256, 0, cur_stream()>>>(d_x, n, reinterpret_cast<__half*>(d_y));
  MLACONF_CUDA_LAUNCH_CHECK("to_half_kernel");
}
void fill_pattern_f16(uint16_t* d_x, int64_t rows, int64_t cols, uint64_t seed) {
  if (rows * cols == 0) return;
  fill_pattern_kernel<<<(unsigned)std::min<int64_t>(ceil_div(rows * cols, 256), 132 * 64), 256, 0, cur_stream()>>>(d_x, rows, cols, seed);
  MLACONF_CUDA_LAUNCH_CHECK("fill_pattern_kernel");
}
void add_inplace(float* d_y, const float* d_x, int64_t n) {
  if (n == 0) return;
  add_kernel<<<grid_for((n + 3) / 4), 256, 0, cur_stream()>>>(d_y, d_x, n);
  MLACONF_CUDA_LAUNCH_CHECK("add_kernel");
}
void scale_inplace(float* d_x, int64_t n, float s) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), 256, 0, cur_stream()>>>(d_x, n, s);
  MLACONF_CUDA_LAUNCH_CHECK("scale_kernel");
}
void gather_rows(const float* d_src, int64_t ld_src, const int32_t* d_idx, int64_t n, int64_t cols, float* d_dst,
                 int64_t ld_dst) {
  if (n == 0) return;
  move_rows(d_src, ld_src, d_idx, n, cols, d_dst, ld_dst, false);
}
void scatter_rows(const float* d_src, int64_t ld_src, const int32_t* d_idx, int64_t n, int64_t cols, float* d_dst,
                  int64_t ld_dst) {
  if (n == 0) return;
  move_rows(d_src, ld_src, d_idx, n, cols, d_dst, ld_dst, true);
}
void weighted_combine(const float* d_x, const float* d_w, int64_t T, int64_t k, int64_t E, const float* d_add, float* d_out,
                      float* d_residual) {
  if (T == 0) return;
  if (E > 128 * 65535ll) throw InputError("cuda::weighted_combine: rows too long");
  combine_kernel<<<dim3((unsigned)T, ceil_div(E, 128)), 128, 0, cur_stream()>>>(d_x, d_w, k, E, d_add, d_out, d_residual);
  MLACONF_CUDA_LAUNCH_CHECK("combine_kernel");
}
void copy2d(void* d_dst, size_t dst_pitch, const void* d_src, size_t src_pitch, size_t width_bytes, size_t rows) {
  if (rows == 0 || width_bytes == 0) return;
  MLACONF_CUDA_CHECK(cudaMemcpy2DAsync(d_dst, dst_pitch, d_src, src_pitch, width_bytes, rows, cudaMemcpyDeviceToDevice, cur_stream()));
}
void split_half(const float* d_x, int64_t n, uint16_t* d_hi, uint16_t* d_lo) {
  if (n == 0) return;
  split_half_kernel<<<grid_for(n), 256, 0, cur_stream()>>>(d_x, n, reinterpret_cast<__half*>(d_hi), reinterpret_cast<__half*>(d_lo));
  MLACONF_CUDA_LAUNCH_CHECK("split_half_kernel");
}
int64_t count_nonfinite(const float* d_x, int64_t n) {
  // Every step on cur_stream(), then a wait for it (the count is read on the host).
  auto* c = static_cast<unsigned long long*>(scratch(7, 8));
  MLACONF_CUDA_CHECK(cudaMemsetAsync(c, 0, 8, cur_stream()));
  if (n) nonfinite_kernel<<<grid_for(n), 256, 0, cur_stream()>>>(d_x, n, c);
  MLACONF_CUDA_LAUNCH_CHECK("nonfinite_kernel");
  unsigned long long h = 0;
  MLACONF_CUDA_CHECK(cudaMemcpyAsync(&h, c, 8, cudaMemcpyDeviceToHost, cur_stream()));
  MLACONF_CUDA_CHECK(cudaStreamSynchronize(cur_stream()));
  return (int64_t)h;
}

}  // namespace mlaconf::cuda
