// mlaconf optimized: x of the tensor-core GEMV as two fp16 terms scaled per 256-value block (gemv_mma_x.cu), in the
// layout the GEMV's B fragments read (gemv_mma.cu).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mlaconf::cuda {

// x slots per column group (an mma's 8 columns: 4 x, 2 terms each).
constexpr int kSlots = 4;

// x [ntok][K] (row stride x_stride) split into `groups` column groups of kSlots slots each (slots past ntok zero),
// one launch (layout: gemv_mma_x.cu). xm: Q4_K's dmin-term fragments, or null (Q6_K). hi_only: the fault
// gemv-x-bf16. chain: launched as a programmatic dependent of the kernel before it (it waits for that kernel's
// writes before reading x).
void split_x(const float* d_x, int64_t x_stride, int64_t K, int64_t ntok, int64_t groups, __half* xi, float* xf,
             __nv_bfloat16* xm, bool hi_only, bool chain);

}  // namespace mlaconf::cuda
