// mlaconf optimized: the block-streaming dequant GEMV for the ggml types with blocks of 32 or 256 values
// other than Q4_K (optimized/gemv_blocks.cu), called by gemv.cu's dispatch.
#pragma once
#include <cstdint>

#include "core/ggml_types.h"

namespace mlaconf::cuda {

// y[b][r] = sum_c W_b[r][c] x_b[c] for b < batch, W_b at d_w + (ids ? ids[b] : b % w_count) * w_stride bytes
// (w_stride 0: one matrix for the whole batch), x_b = d_x + b * x_stride, y_b = d_y + b * y_stride.
// Batch entries that share a matrix are computed together (each weight block decoded once for up to 8
// of them); every (row, b) result is the same bits whatever the batch and its grouping.
// Returns false (and launches nothing) when the type or the alignment is not covered: the caller then
// runs the generic kernel. Needs d_w, w_stride, d_x 16-byte aligned and x_stride a multiple of 4.
bool gemv_blocks(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const int32_t* d_ids, int64_t w_count,
                 int64_t w_stride, const float* d_x, int64_t x_stride, float* d_y, int64_t y_stride, int64_t batch);

// True for the types gemv_blocks covers (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q5_K, Q6_K).
bool gemv_blocks_covers(GgmlType t);

}  // namespace mlaconf::cuda
