// mlaconf optimized: the GEMV for unquantized weights (F32, F16, BF16: the MoE router, float heads),
// optimized/gemv_float.cu, called by gemv.cu's dispatch.
#pragma once
#include <cstdint>

#include "core/ggml_types.h"

namespace mlaconf::cuda {

// y[b][r] = sum_c W_b[r][c] x_b[c] for b < batch, W_b at d_w + (ids ? ids[b] : b % w_count) * w_stride bytes
// (w_stride 0: one matrix for the whole batch), x_b = d_x + b * x_stride, y_b = d_y + b * y_stride.
// Each (row, b) result is summed in an order fixed by (type, ncols) alone: the same bits whatever the
// batch, the ids, the grouping of rows or entries per CTA and the alignment of the pointers.
// Returns false (launching nothing) for other types.
bool gemv_float(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const int32_t* d_ids, int64_t w_count,
                int64_t w_stride, const float* d_x, int64_t x_stride, float* d_y, int64_t y_stride, int64_t batch);

}  // namespace mlaconf::cuda
