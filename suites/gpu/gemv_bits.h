// suites/gpu: the checks every dequant-GEMV suite makes (the Q4_K kernel's in test_gemv_q4k.cpp, the
// block kernel's in test_gemv_blocks.cpp), so that the two kernels are held to one rule:
//  (1) each output against float64 on the reference dequantizer's weights: |got - want| <= kGemvBound *
//      sum |w x| (the emulations themselves show <= 3e-8 of that scale on the suites' shapes);
//  (2) bit for bit against an emulation of the kernel's documented fp32 order (each suite brings its own);
//  (3) every batch entry (B x on one matrix, or experts by id) bit-identical to the same x alone.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/ggml_types.h"
#include "optimized/kernel_config.h"

namespace mlaconf::gputest {

inline constexpr double kGemvBound = 2e-6;

std::vector<float> random_x(size_t n, uint64_t seed);

struct Judged {
  double worst = 0;       // max |got - want| / sum |w x|
  int64_t not_exact = 0;  // outputs differing from the emulation's bits
};
// The kernel's bits for row `row` of matrix `mat` and one x (cols values).
using RowEmulation = std::function<float(int64_t mat, int64_t row, const float* x)>;
// Makes a suite's emulation from the raw blocks and their reference-dequantized values [mats * rows, cols].
// A kernel without a documented fp32 order (the tensor-core GEMV) passes an empty RowEmulation: check (2)
// is then skipped, (1) and (3) still made.
using MakeEmulation = std::function<RowEmulation(const std::vector<uint8_t>& blocks, const std::vector<float>& W)>;

// y[j * rows + r] for entries j, entry j on matrix mat[j] (rows x cols of W) and x_j = x + j * cols.
Judged judge_gemv(const std::vector<float>& got, const std::vector<float>& W, const std::vector<int64_t>& mat,
                  const std::vector<float>& x, int64_t rows, int64_t cols, const RowEmulation& emulate);
void expect_judged(const Judged& j, const char* what, double bound = kGemvBound);

// Check (3): the entries of got ([n][rows]) whose bits differ from that entry run by itself, where alone(e, d_y)
// runs entry e alone into d_y (rows floats on the device).
int64_t entries_unlike_alone(const std::vector<float>& got, int64_t n, int64_t rows,
                             const std::function<void(int64_t e, float* d_y)>& alone);

// Each suite pins the kernels it checks (k: GemvKernel::Simt for the bit-exact emulations, Mma for the tensor cores).
// B x vectors on one random matrix (batched decode), judged; then each entry alone, bit-identical.
void gemv_batch_check(cuda::GemvKernel k, GgmlType t, int64_t rows, int64_t cols, int B, uint64_t w_seed, uint64_t x_seed,
                      const MakeEmulation& make, double bound = kGemvBound);
// Experts by id from a pool of `pool` random matrices, one x per entry, judged; each entry alone bit-identical.
void gemv_experts_check(cuda::GemvKernel k, GgmlType t, int64_t rows, int64_t cols, const std::vector<int32_t>& ids, int64_t pool, uint64_t w_seed,
                        uint64_t x_seed, const MakeEmulation& make, double bound = kGemvBound);

}  // namespace mlaconf::gputest
