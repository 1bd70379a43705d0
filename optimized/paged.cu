// mlaconf optimized: the kernels of the paged latent cache that batched decode uses (optimized/api.h):
// writing a pass's latent rows to their pages, and turning a sequence's top-k positions into absolute
// rows of the shared cache.
#include <cuda_fp16.h>

#include <algorithm>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"

namespace mlaconf::cuda {
namespace {

unsigned grid_of(int64_t n) { return (unsigned)std::min<int64_t>(std::max<int64_t>(ceil_div(n, 256), 1), 65535); }

__global__ void to_half_rows_kernel(const float* src, int64_t T, int64_t d, const int32_t* rows, __half* dst) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < T * d; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = e / d, c = e - t * d;
    dst[(int64_t)rows[t] * d + c] = __float2half_rn(src[e]);
  }
}

__global__ void paged_rows_kernel(int32_t* idx, int64_t T, int64_t K, const int32_t* row_tab, const int32_t* tab,
                                  int64_t max_pages, int64_t page_rows) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < T * K; e += (int64_t)gridDim.x * blockDim.x) {
    const int32_t p = idx[e];
    if (p < 0) continue;
    const int64_t t = e / K, pg = p / page_rows;
    const int32_t page = pg < max_pages ? tab[(int64_t)row_tab[t] * max_pages + pg] : -1;
    idx[e] = page < 0 ? -1 : (int32_t)((int64_t)page * page_rows + (p - pg * page_rows));
  }
}

__global__ void fill_pattern_f32_kernel(float* x, int64_t rows, int64_t cols, uint64_t seed) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < rows * cols; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / cols;
    x[e] = half_bits_to_float(pattern_half_bits(seed, r, e - r * cols));
  }
}

}  // namespace

void to_half_rows(const float* d_src, int64_t T, int64_t d, const int32_t* d_rows, uint16_t* d_dst) {
  if (T < 0 || d < 0) throw InputError("cuda::to_half_rows: negative shape");
  if (T * d == 0) return;
  to_half_rows_kernel<<<grid_of(T * d), 256, 0, cur_stream()>>>(d_src, T, d, d_rows, reinterpret_cast<__half*>(d_dst));
  MLACONF_CUDA_LAUNCH_CHECK("to_half_rows_kernel");
}

void paged_rows(int32_t* d_idx, int64_t T, int64_t K, const int32_t* d_row_tab, const int32_t* d_tab, int64_t max_pages,
                int64_t page_rows) {
  if (T < 0 || K < 0 || max_pages < 1 || page_rows < 1) throw InputError("cuda::paged_rows: bad shape");
  if (T * K == 0) return;
  paged_rows_kernel<<<grid_of(T * K), 256, 0, cur_stream()>>>(d_idx, T, K, d_row_tab, d_tab, max_pages, page_rows);
  MLACONF_CUDA_LAUNCH_CHECK("paged_rows_kernel");
}

void fill_pattern_f32(float* d_x, int64_t rows, int64_t cols, uint64_t seed) {
  if (rows * cols == 0) return;
  fill_pattern_f32_kernel<<<grid_of(rows * cols), 256, 0, cur_stream()>>>(d_x, rows, cols, seed);
  MLACONF_CUDA_LAUNCH_CHECK("fill_pattern_f32_kernel");
}

}  // namespace mlaconf::cuda
