// mlaconf optimized: the tensor-core dequant GEMV for Q4_K and Q6_K (optimized/gemv_mma.cu), called by
// gemv.cu's dispatch: in the default where gemv_mma_by_default says so, at every shape for GemvKernel::Mma.
#pragma once
#include <cstdint>

#include "core/ggml_types.h"

namespace mlaconf::cuda {

// y[b][r] = sum_c W_b[r][c] x_b[c] for b < batch, W_b at d_w + (ids ? ids[b] : b % w_count) * w_stride bytes
// (w_stride 0 or w_count 1: one matrix for the whole batch, 8 or 16 x per pass decoding each weight once),
// x_b = d_x + b * x_stride (x_stride 0: one x for all), y_b = d_y + b * y_stride. Every (row, b) result is
// the same bits whatever the batch, its grouping and the other entries. With ids, an id of -1 takes the
// matrix at d_w_alt (16-byte aligned, the shape of the others): a shared expert as one more entry.
// Returns false (launches nothing) for other types, ncols not a multiple of 256, or misaligned pointers:
// the caller then runs the SIMT kernels.
// Whether the default GEMV (GemvKernel::Default) runs this shape here: Q4_K or Q6_K with at least 1024
// rows and 2048 columns. Measured on the H200 (docs/perf/gemv-blocks.md): there the tensor cores are
// 2-3x faster than SIMT at B = 8 and the Q6_K ones 1.3-1.5x at B = 1 too, except at 2048 rows, where one
// matrix alone is 1.05-1.5x slower but the experts of that shape (by id) 1.3x faster; below (576 x 6144, the
// 64 per-head 256 x 512 matrices) they lost at both B = 1 and 8. A rule of the shape, never of the batch.
bool gemv_mma_by_default(GgmlType t, int64_t n_rows, int64_t ncols);

// Grouped experts (gemv_experts_grouped in api.h): group_pairs' table and count, and the output row of each slot.
struct ExpertGroupsArg {
  const int32_t* groups;
  const int32_t* n_groups;
  const int32_t* out_rows;
};

// A launch's CTA shape: rt row tiles (16 rows) per CTA, ks warps splitting K (ks fixes the order of a row's
// sums beyond 128 row tiles; rt x ks warps per CTA, 4 or 8), and a shared matrix's column groups per pass.
// shared: one matrix for the batch; grouped: grouped experts. Exposed for suites/gpu, which checks that the
// balanced shapes keep the bits, and for kernel_bench.
struct MmaCta {
  int rt, ks;
  int cg;  // a shared matrix's column groups per pass (4 x each): 4 or 2
  bool xs;  // x through shared memory (K not split, CTAs of 8 warps, more than 8 x; or grouped experts in CTAs of 2 row
            // tiles)
};
MmaCta gemv_mma_cta(int64_t n_rows, int64_t ncols, int64_t batch, bool shared, bool grouped);
// Whether a launch stages x per warp: a Q4_K pass of one live x slot, i.e. an entry that is not a
// shared pass (the experts by id; not grouped) or one matrix at one x. Exposed for kernel_bench.
bool gemv_mma_xwarp_pass(GgmlType t, int64_t batch, bool shared, bool grouped);

bool gemv_mma(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const int32_t* d_ids, int64_t w_count,
              int64_t w_stride, const float* d_x, int64_t x_stride, float* d_y, int64_t y_stride, int64_t batch,
              const void* d_w_alt = nullptr, const ExpertGroupsArg* grouped = nullptr);

}  // namespace mlaconf::cuda
