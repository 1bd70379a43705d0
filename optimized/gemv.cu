// mlaconf optimized: decode GEMV fused with dequantization, and the prefill GEMM (dequant to fp16, cuBLAS).
//
// The GEMV reads the weight rows as raw ggml blocks: one warp per output row, each lane decoding the
// values it multiplies (dq_elem) with fp32 accumulation; x is read through the cache. Batches cover
// the per-head W_UV products and expert matrices.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"
#include "optimized/dequant_elem.cuh"
#include "optimized/iq_grids.cuh"

namespace mlaconf::cuda {
namespace {

constexpr int kGemvThreads = 256;

// grid (ceil(rows/8), batch). W_b = w + (b % w_count) * w_stride bytes.
__global__ void __launch_bounds__(kGemvThreads) gemv_kernel(int type, const uint8_t* __restrict__ w, int64_t n_rows,
                                                            int64_t ncols, int64_t row_bytes, int bs, int ts,
                                                            int64_t w_count, int64_t w_stride, const float* __restrict__ x,
                                                            int64_t x_stride, float* __restrict__ y, int64_t y_stride) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * (kGemvThreads / 32) + warp;
  const int64_t b = blockIdx.y;
  if (row >= n_rows) return;
  const IqGrids g = device_grids();
  const uint8_t* wr = w + (b % w_count) * w_stride + row * row_bytes;
  const float* xb = x + b * x_stride;
  float acc = 0.f;
  if (bs == 1) {
    for (int64_t c = lane; c < ncols; c += 32) acc = fmaf(dq_elem(type, wr + c * ts, 0, g), __ldg(xb + c), acc);
  } else {
    // Lane-contiguous values inside a block: lanes share its scale bytes through L1.
    for (int64_t c = lane; c < ncols; c += 32) {
      const int64_t blk = c / bs;
      acc = fmaf(dq_elem(type, wr + blk * ts, (int)(c - blk * bs), g), __ldg(xb + c), acc);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) y[b * y_stride + row] = acc;
}

// One handle per device (a handle belongs to the device current when it was created), made on first use.
cublasHandle_t cublas() {
  constexpr int kMaxDevices = 64;
  static cublasHandle_t h[kMaxDevices] = {};
  const int d = current_device();
  if (d >= kMaxDevices) throw CudaError("cublas: device ordinal " + std::to_string(d) + " beyond 63");
  if (!h[d] && cublasCreate(&h[d]) != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasCreate failed");
  return h[d];
}

void gemv_impl(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const float* d_x, float* d_y, int64_t batch,
               int64_t w_count, int64_t w_stride, int64_t x_stride, int64_t y_stride) {
  if (!can_dequantize(t)) throw InputError(std::string("cuda::gemv: unsupported weight type ") + type_name(t));
  if (n_rows <= 0 || ncols <= 0 || batch <= 0) throw InputError("cuda::gemv: empty shape");
  const auto& tr = traits(t);
  const int64_t rb = row_bytes(t, ncols);  // throws InputError when ncols is not a block multiple
  dim3 grid(ceil_div(n_rows, kGemvThreads / 32), (unsigned)batch);
  gemv_kernel<<<grid, kGemvThreads>>>((int)t, static_cast<const uint8_t*>(d_w), n_rows, ncols, rb, (int)tr.block_size,
                                      (int)tr.type_size, w_count, w_stride, d_x, x_stride, d_y, y_stride);
  MLACONF_CUDA_LAUNCH_CHECK("gemv_kernel");
}

}  // namespace

void gemv(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const float* d_x, float* d_y, int64_t batch,
          int64_t w_batch_stride, int64_t x_stride, int64_t y_stride) {
  gemv_impl(t, d_w, n_rows, ncols, d_x, d_y, batch, batch, w_batch_stride, x_stride, y_stride);
}

void apply_wuv(GgmlType t, const void* d_wuv, int64_t v, int64_t d_v, const float* d_latent, int64_t T, int64_t H,
               float* d_out) {
  // batch b = t * H + h uses head h's matrix (v rows of d_v values).
  if (T == 0) return;
  gemv_impl(t, d_wuv, v, d_v, d_latent, d_out, T * H, H, row_bytes(t, d_v) * v, d_v, v);
}

void gemv_per_head(GgmlType t, const void* d_w, int64_t rows, int64_t cols, int64_t H, const float* d_x, int64_t x_stride,
                   float* d_y, int64_t y_stride, int64_t batch) {
  if (batch == 0) return;
  gemv_impl(t, d_w, rows, cols, d_x, d_y, batch, H, row_bytes(t, cols) * rows, x_stride, y_stride);
}

static void gemm_f16_beta(const uint16_t* d_x, const uint16_t* d_w, int64_t T, int64_t n_rows, int64_t ncols, float* d_y,
                          float beta) {
  if (T == 0) return;
  // Column-major view: Y^T [n_rows, T] = W [ncols, n_rows]^T . X^T [ncols, T].
  const float one = 1.f, zero = beta;
  cublasStatus_t s = cublasGemmEx(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, (int)n_rows, (int)T, (int)ncols, &one, d_w, CUDA_R_16F,
                                  (int)ncols, d_x, CUDA_R_16F, (int)ncols, &zero, d_y, CUDA_R_32F, (int)n_rows,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasGemmEx failed with status " + std::to_string((int)s));
}
void gemm_f16(const uint16_t* d_x, const uint16_t* d_w, int64_t T, int64_t n_rows, int64_t ncols, float* d_y) {
  gemm_f16_beta(d_x, d_w, T, n_rows, ncols, d_y, 0.f);
}

void linear_prefill(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const float* d_x, int64_t T,
                    float* d_y, DeviceBuffer* scratch_buf) {
  if (T == 0) return;
  const size_t wbytes = (size_t)n_rows * ncols * 2, xbytes = (size_t)T * ncols * 2;
  if (scratch_buf->bytes() < wbytes + 2 * xbytes) *scratch_buf = DeviceBuffer(wbytes + 2 * xbytes);
  uint16_t* wh = scratch_buf->as<uint16_t>();
  uint16_t* xh = wh + (size_t)n_rows * ncols;
  uint16_t* xl = xh + (size_t)T * ncols;
  dequantize_f16(t, d_w, n_rows * ncols, wh);
  split_half(d_x, T * ncols, xh, xl);
  gemm_f16_beta(xh, wh, T, n_rows, ncols, d_y, 0.f);
  gemm_f16_beta(xl, wh, T, n_rows, ncols, d_y, 1.f);
}

void linear_prefill_x3(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const float* d_x, int64_t T,
                       float* d_y, DeviceBuffer* scratch_buf) {
  if (T == 0) return;
  const size_t nw = (size_t)n_rows * ncols, nx = (size_t)T * ncols;
  const size_t need = nw * 4 + nw * 4 + nx * 4;  // W f32, W hi+lo, X hi+lo
  if (scratch_buf->bytes() < need) *scratch_buf = DeviceBuffer(need);
  float* wf = scratch_buf->as<float>();
  uint16_t* wh = reinterpret_cast<uint16_t*>(wf + nw);
  uint16_t* wl = wh + nw;
  uint16_t* xh = wl + nw;
  uint16_t* xl = xh + nx;
  dequantize_f32(t, d_w, (int64_t)nw, wf);
  split_half(wf, (int64_t)nw, wh, wl);
  split_half(d_x, (int64_t)nx, xh, xl);
  gemm_f16_beta(xh, wh, T, n_rows, ncols, d_y, 0.f);
  gemm_f16_beta(xl, wh, T, n_rows, ncols, d_y, 1.f);
  gemm_f16_beta(xh, wl, T, n_rows, ncols, d_y, 1.f);
}

void linear_prefill_f32(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const float* d_x, int64_t T,
                        float* d_y, DeviceBuffer* scratch_buf) {
  if (T == 0) return;
  const size_t wbytes = (size_t)n_rows * ncols * 4;
  if (scratch_buf->bytes() < wbytes) *scratch_buf = DeviceBuffer(wbytes);
  dequantize_f32(t, d_w, n_rows * ncols, scratch_buf->as<float>());
  const float one = 1.f, zero = 0.f;
  cublasStatus_t s = cublasGemmEx(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, (int)n_rows, (int)T, (int)ncols, &one,
                                  scratch_buf->get(), CUDA_R_32F, (int)ncols, d_x, CUDA_R_32F, (int)ncols, &zero, d_y,
                                  CUDA_R_32F, (int)n_rows, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasGemmEx (fp32) failed with status " + std::to_string((int)s));
}

}  // namespace mlaconf::cuda
