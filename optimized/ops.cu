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

// One CTA per row.
__global__ void rmsnorm_kernel(const float* x, const float* w, int64_t D, int64_t ld, float eps, float* y) {
  __shared__ float red[32];
  const float* xr = x + blockIdx.x * ld;
  float* yr = y + blockIdx.x * ld;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
  const float tot = block_sum(ss, red);
  const float r = rsqrtf(tot / (float)D + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = w[i] * (xr[i] * r);
}

__global__ void layernorm_kernel(const float* x, const float* w, const float* b, int64_t D, float eps, float* y) {
  __shared__ float red[32];
  const float* xr = x + blockIdx.x * D;
  float* yr = y + blockIdx.x * D;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s, red) / (float)D;
  float v = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) v = fmaf(xr[i] - mean, xr[i] - mean, v);
  const float r = rsqrtf(block_sum(v, red) / (float)D + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = fmaf(w[i], (xr[i] - mean) * r, b[i]);
}

// One thread per (token, vector, pair). Angles in double: float angles drift ~1e-4 rad at position 4096.
__global__ void rope_kernel(float* x, int64_t T, int64_t n_vec, int64_t stride, int64_t col0, int64_t dim,
                            const int32_t* pos, double theta, bool neox) {
  const int64_t half = dim / 2;
  const int64_t n = T * n_vec * half;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e % half, v = (e / half) % n_vec, t = e / (half * n_vec);
    const double inv = pow(theta, -2.0 * (double)i / (double)dim);
    double sn, cs;
    sincos((double)pos[t] * inv, &sn, &cs);
    float* base = x + (t * n_vec + v) * stride + col0;
    const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = base[a], x1 = base[b];
    base[a] = (float)(x0 * cs - x1 * sn);
    base[b] = (float)(x0 * sn + x1 * cs);
  }
}

__global__ void silu_gate_kernel(const float* g, const float* u, int64_t n, float* out) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const float x = g[e];
    out[e] = x / (1.f + expf(-x)) * u[e];
  }
}

__global__ void to_half_kernel(const float* x, int64_t n, __half* y) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
    y[e] = __float2half_rn(x[e]);
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
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) y[e] += x[e];
}
__global__ void scale_kernel(float* x, int64_t n, float s) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) x[e] *= s;
}
// grid.x = rows; scatter = false: dst[r] = src[idx[r]]; true: dst[idx[r]] = src[r].
__global__ void move_rows_kernel(const float* src, int64_t ld_src, const int32_t* idx, int64_t cols, float* dst,
                                 int64_t ld_dst, bool scatter) {
  const int64_t r = blockIdx.x;
  const int64_t from = scatter ? r : idx[r], to = scatter ? idx[r] : r;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[to * ld_dst + c] = src[from * ld_src + c];
}
__global__ void combine_kernel(const float* x, const float* w, int64_t k, int64_t E, const float* add, float* out) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x; c < E; c += blockDim.x) {
    float acc = add ? add[t * E + c] : 0.f;
    for (int64_t j = 0; j < k; ++j) acc = fmaf(w[t * k + j], x[(t * k + j) * E + c], acc);
    out[t * E + c] = acc;
  }
}

unsigned grid_for(int64_t n) { return (unsigned)std::min<int64_t>(ceil_div(std::max<int64_t>(n, 1), 256), 4096); }

}  // namespace

void rmsnorm(const float* d_x, const float* d_w, int64_t T, int64_t D, int64_t ld, float eps, float* d_y) {
  if (D <= 0 || ld < D) throw InputError("cuda::rmsnorm: bad shape");
  if (T == 0) return;
  rmsnorm_kernel<<<(unsigned)T, 256, 0, cur_stream()>>>(d_x, d_w, D, ld, eps, d_y);
  MLACONF_CUDA_LAUNCH_CHECK("rmsnorm_kernel");
}
void layernorm(const float* d_x, const float* d_w, const float* d_b, int64_t T, int64_t D, float eps, float* d_y) {
  if (D <= 0) throw InputError("cuda::layernorm: bad shape");
  if (T == 0) return;
  layernorm_kernel<<<(unsigned)T, 128, 0, cur_stream()>>>(d_x, d_w, d_b, D, eps, d_y);
  MLACONF_CUDA_LAUNCH_CHECK("layernorm_kernel");
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
  silu_gate_kernel<<<grid_for(n), 256, 0, cur_stream()>>>(d_gate, d_up, n, d_out);
  MLACONF_CUDA_LAUNCH_CHECK("silu_gate_kernel");
}
void to_half(const float* d_x, int64_t n, uint16_t* d_y) {
  if (n == 0) return;
  to_half_kernel<<<grid_for(n), 256, 0, cur_stream()>>>(d_x, n, reinterpret_cast<__half*>(d_y));
  MLACONF_CUDA_LAUNCH_CHECK("to_half_kernel");
}
void fill_pattern_f16(uint16_t* d_x, int64_t rows, int64_t cols, uint64_t seed) {
  if (rows * cols == 0) return;
  fill_pattern_kernel<<<(unsigned)std::min<int64_t>(ceil_div(rows * cols, 256), 132 * 64), 256, 0, cur_stream()>>>(d_x, rows, cols, seed);
  MLACONF_CUDA_LAUNCH_CHECK("fill_pattern_kernel");
}
void add_inplace(float* d_y, const float* d_x, int64_t n) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), 256, 0, cur_stream()>>>(d_y, d_x, n);
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
  move_rows_kernel<<<(unsigned)n, 256, 0, cur_stream()>>>(d_src, ld_src, d_idx, cols, d_dst, ld_dst, false);
  MLACONF_CUDA_LAUNCH_CHECK("move_rows_kernel");
}
void scatter_rows(const float* d_src, int64_t ld_src, const int32_t* d_idx, int64_t n, int64_t cols, float* d_dst,
                  int64_t ld_dst) {
  if (n == 0) return;
  move_rows_kernel<<<(unsigned)n, 256, 0, cur_stream()>>>(d_src, ld_src, d_idx, cols, d_dst, ld_dst, true);
  MLACONF_CUDA_LAUNCH_CHECK("move_rows_kernel");
}
void weighted_combine(const float* d_x, const float* d_w, int64_t T, int64_t k, int64_t E, const float* d_add, float* d_out) {
  if (T == 0) return;
  combine_kernel<<<(unsigned)T, 256, 0, cur_stream()>>>(d_x, d_w, k, E, d_add, d_out);
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
  auto* c = static_cast<unsigned long long*>(scratch(7, 8));
  MLACONF_CUDA_CHECK(cudaMemset(c, 0, 8));
  if (n) nonfinite_kernel<<<grid_for(n), 256, 0, cur_stream()>>>(d_x, n, c);
  MLACONF_CUDA_LAUNCH_CHECK("nonfinite_kernel");
  unsigned long long h = 0;
  MLACONF_CUDA_CHECK(cudaMemcpy(&h, c, 8, cudaMemcpyDeviceToHost));
  return (int64_t)h;
}

}  // namespace mlaconf::cuda
