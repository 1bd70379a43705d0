// mlaconf optimized: the tensor-core dequant GEMV for Q4_K and Q6_K (optimized/gemv_mma.cu), called by
// gemv.cu's dispatch for kernel variant 3.
#pragma once
#include <cstdint>

#include "core/ggml_types.h"

namespace mlaconf::cuda {

// y[b][r] = sum_c W_b[r][c] x_b[c] for b < batch, W_b at d_w + (ids ? ids[b] : b % w_count) * w_stride bytes
// (w_stride 0 or w_count 1: one matrix for the whole batch, up to 8 x per pass decoding each weight once),
// x_b = d_x + b * x_stride (x_stride 0: one x for all), y_b = d_y + b * y_stride. Every (row, b) result is
// the same bits whatever the batch, its grouping and the other entries.
// Returns false (launches nothing) for other types, ncols not a multiple of 256, or misaligned pointers:
// the caller then runs the SIMT kernels.
bool gemv_mma(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const int32_t* d_ids, int64_t w_count,
              int64_t w_stride, const float* d_x, int64_t x_stride, float* d_y, int64_t y_stride, int64_t batch);

}  // namespace mlaconf::cuda
