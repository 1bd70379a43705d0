// mlaconf optimized: decode GEMV fused with dequantization, and the prefill GEMM (dequant to fp16, cuBLAS).
//
// The GEMV reads the weight rows as raw ggml blocks: one warp per output row, each lane decoding the
// values it multiplies (dq_elem) with fp32 accumulation; x is read through the cache. Batches cover
// the per-head W_UV products and expert matrices.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"
#include "optimized/dequant_elem.cuh"
#include "optimized/faults.h"
#include "optimized/gemv_blocks.cuh"
#include "optimized/gemv_float.cuh"
#include "optimized/gemv_mma.cuh"
#include "optimized/iq_grids.cuh"

namespace mlaconf::cuda {

namespace {

constexpr int kGemvThreads = 256;

// grid (ceil(rows/8), batch), or (batch, ceil(rows/8)) when batch_major. W_b = w + (b % w_count) * w_stride bytes.
__global__ void __launch_bounds__(kGemvThreads) gemv_kernel(int type, const uint8_t* __restrict__ w, int64_t n_rows,
                                                            int64_t ncols, int64_t row_bytes, int bs, int ts,
                                                            int64_t w_count, int64_t w_stride, const int32_t* __restrict__ ids,
                                                            const float* __restrict__ x,
                                                            int64_t x_stride, float* __restrict__ y, int64_t y_stride,
                                                            bool batch_major) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = (int64_t)(batch_major ? blockIdx.y : blockIdx.x) * (kGemvThreads / 32) + warp;
  const int64_t b = batch_major ? blockIdx.x : blockIdx.y;
  if (row >= n_rows) return;
  const IqGrids g = device_grids();
  const uint8_t* wr = w + (ids ? (int64_t)ids[b] : b % w_count) * w_stride + row * row_bytes;
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

// ---- Q4_K GEMV (the quantization GLM-5 GGUFs use for their large matrices) -------------------------
// Nibbles become floats exactly by the 2^23 trick (byte in the mantissa of 2^23, minus 2^23).
__device__ __forceinline__ float nib(uint32_t word, int byte) {
  return __uint_as_float(__byte_perm(word, 0x4B000000u, (uint32_t)byte | 0x7540u)) - 8388608.f;
}

// Why this mapping: a kernel whose CTAs of 8-32 rows first summed all of x per sub-block (as many bytes of x
// read from L2 as of weights), then reduced whole 256-value blocks in one dependent chain per thread, with all
// of a CTA's loads issued at the start, reached 14 % of the copy floor at 2048 x 6144 (its phases did not
// overlap; docs/perf/gemv-blocks.md).
// A CTA takes 8 rows and G groups of 8 lanes (blockDim = 8 G); lane r of a group works on row r, so the
// 8 lanes of a group read the same x (one broadcast) and each its own row. A row's items are its 64-value
// pieces: item i = 4 b + j is block b's sub-blocks 2j and 2j + 1 (its 32 qs bytes j: the low nibbles are
// sub-block 2j, the high ones 2j + 1), read as three 16-byte loads (the 16-byte header: d, dmin, scales;
// the two qs words); group g takes items g, g + G, g + 2G, ... and loads the next item's 48 bytes before
// reducing the current one. The sum of x over a sub-block is split over the group (lanes 0-3: sub-block 2j,
// lanes 4-7: 2j + 1, 8 values each) and combined by shuffles, so no pre-pass and no shared x. When the
// whole batch uses one matrix, a CTA takes 4 x and decodes each weight once for them.
// fp32 order of one row (fixed by the shape: G comes from rows and cols alone, never from the batch):
//   item (b, j): dot_lo = fmaf chain over the 32 values of sub-block 2j in column order (nibble value times
//   x), dot_hi likewise for 2j + 1; sum_s = ((x0+x1)+(x2+x3)) + ((x4+x5)+(x6+x7)) per lane's 8 values, then
//   (s_l + s_l^1) + (..)^2 over the 4 lanes; acc += (d*sc_lo)*dot_lo - (dmin*m_lo)*sum_lo, then the same
//   for hi (each product and sum rounded on its own);
//   per thread: acc over its items in order; then the 4 groups of a warp by xor-shuffles 8 and 16; then the
//   warps' partials added in warp order.
constexpr int kQ4v2Rows = 8;
constexpr int kQ4v2MaxThreads = 512;  // G <= 64: up to 128 registers per thread for the NB = 4 pass
constexpr int kQ4v2MaxX = 4;          // x vectors per pass when the whole batch shares one matrix

__device__ __forceinline__ float fsum8(const float4& a, const float4& c) {
  return __fadd_rn(__fadd_rn(__fadd_rn(a.x, a.y), __fadd_rn(a.z, a.w)), __fadd_rn(__fadd_rn(c.x, c.y), __fadd_rn(c.z, c.w)));
}

// NB x vectors per CTA, all on one matrix when NB > 1: entries b0 + k es, k < NB. es = 1 (the whole batch shares
// the matrix): b0 = pass x NB. es > 1 (per-head matrices, entry b on matrix b % es, es = w_count: the pass of
// matrix h over NB of its tokens): pass p = tg es + h, b0 = tg NB es + h. Each weight is decoded once for the
// NB of them; every (row, x) result has exactly the NB = 1 order (each x its own chains, sums and reductions).
template <int NB, int DEPTH>
__global__ void __launch_bounds__(kQ4v2MaxThreads) gemv_q4k_v2_kernel(const uint8_t* __restrict__ w, int64_t n_rows, int nb,
                                                                      const int32_t* __restrict__ ids, int64_t w_count,
                                                                      int64_t mat_stride, const float* __restrict__ x,
                                                                      int64_t x_stride, float* __restrict__ y, int64_t y_stride,
                                                                      int64_t batch, bool batch_major, int es) {
  __shared__ float red[kQ4v2MaxThreads / 32][NB][kQ4v2Rows];
  pdl_trigger();  // a chained GEMV's x split (attn_output's, after W_UV) may launch: it waits for this kernel
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int G = blockDim.x / kQ4v2Rows;  // groups per CTA (a multiple of 4)
  const int r = lane & 7, g = tid >> 3;
  const int64_t pass = batch_major ? blockIdx.x : blockIdx.y;
  // Entries fit 32 bits (batch <= 65535, gemv_q4k_v2).
  const int b0 = NB == 1 ? (int)pass : (int)(pass / es) * NB * es + (int)(pass % es), nbatch = (int)batch;
  const int64_t mat = ids ? (int64_t)ids[b0] : b0 % w_count;
  const float* xb[NB];
#pragma unroll
  for (int k = 0; k < NB; ++k) xb[k] = x + (int64_t)(b0 + k * es < nbatch ? b0 + k * es : b0) * x_stride;  // past the batch: unused
  const int64_t row = (int64_t)(batch_major ? blockIdx.y : blockIdx.x) * kQ4v2Rows + r;
  const uint4* wr = reinterpret_cast<const uint4*>(w + mat * mat_stride + min(row, n_rows - 1) * ((int64_t)nb * 144));
  const int nitems = nb * 4;
  // Loads of DEPTH items ahead are in flight while a thread reduces one (slot 0: the next to reduce).
  uint4 h[DEPTH], q0[DEPTH], q1[DEPTH];
  int it = g;
#pragma unroll
  for (int s = 0; s < DEPTH; ++s) {
    h[s] = q0[s] = q1[s] = make_uint4(0, 0, 0, 0);
    const int i = it + s * G;
    if (i < nitems) {
      const uint4* p = wr + (i >> 2) * 9;
      h[s] = __ldg(p), q0[s] = __ldg(p + 1 + 2 * (i & 3)), q1[s] = __ldg(p + 2 + 2 * (i & 3));
    }
  }
  float acc[NB];
#pragma unroll
  for (int k = 0; k < NB; ++k) acc[k] = 0.f;
  const int rounds = (nitems + G - 1) / G;  // the same for every thread: the shuffles below stay converged
  for (int rd = 0; rd < rounds; ++rd, it += G) {
    const bool valid = it < nitems;
    const uint4 ch = h[0], c0 = q0[0], c1 = q1[0];
#pragma unroll
    for (int s = 0; s + 1 < DEPTH; ++s) h[s] = h[s + 1], q0[s] = q0[s + 1], q1[s] = q1[s + 1];
    if (it + DEPTH * G < nitems) {
      const int nx = it + DEPTH * G;
      const uint4* p = wr + (nx >> 2) * 9;
      h[DEPTH - 1] = __ldg(p), q0[DEPTH - 1] = __ldg(p + 1 + 2 * (nx & 3)), q1[DEPTH - 1] = __ldg(p + 2 + 2 * (nx & 3));
    }
    const int j = it & 3;
    const int64_t xoff = valid ? (int64_t)(it >> 2) * 256 + 64 * j : 0;  // sub-block 2j: [0, 32), 2j + 1: [32, 64)
    // Sum of x per sub-block, split over the group: lane r sums x[xoff + 8r, + 8).
    float sum_lo[NB], sum_hi[NB];
#pragma unroll
    for (int k = 0; k < NB; ++k) {
      const float4* xs = reinterpret_cast<const float4*>(xb[k] + xoff + 8 * r);
      float s = fsum8(__ldg(xs), __ldg(xs + 1));
      s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 1));
      s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 2));
      sum_lo[k] = __shfl_sync(0xffffffffu, s, lane & ~7);
      sum_hi[k] = __shfl_sync(0xffffffffu, s, (lane & ~7) + 4);
    }
    if (valid) {
      const uint32_t qw[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
      float dl[NB], dh[NB];
#pragma unroll
      for (int k = 0; k < NB; ++k) dl[k] = 0.f, dh[k] = 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const uint32_t lo = qw[e] & 0x0F0F0F0Fu, hi = (qw[e] >> 4) & 0x0F0F0F0Fu;
        const float l0 = nib(lo, 0), l1 = nib(lo, 1), l2 = nib(lo, 2), l3 = nib(lo, 3);
        const float h0 = nib(hi, 0), h1 = nib(hi, 1), h2 = nib(hi, 2), h3 = nib(hi, 3);
#pragma unroll
        for (int k = 0; k < NB; ++k) {
          const float4* xa = reinterpret_cast<const float4*>(xb[k] + xoff);
          const float4 a = __ldg(xa + e), c = __ldg(xa + 8 + e);
          dl[k] = fmaf(l0, a.x, dl[k]);
          dl[k] = fmaf(l1, a.y, dl[k]);
          dl[k] = fmaf(l2, a.z, dl[k]);
          dl[k] = fmaf(l3, a.w, dl[k]);
          dh[k] = fmaf(h0, c.x, dh[k]);
          dh[k] = fmaf(h1, c.y, dh[k]);
          dh[k] = fmaf(h2, c.z, dh[k]);
          dh[k] = fmaf(h3, c.w, dh[k]);
        }
      }
      // ggml's get_scale_min_k4 for sub-blocks 2j and 2j + 1, four bytes at a time (scales: ch.y, ch.z, ch.w).
      uint32_t SC, M;
      if (j < 2) {
        SC = ch.y & 0x3F3F3F3Fu, M = ch.z & 0x3F3F3F3Fu;
      } else {
        SC = (ch.w & 0x0F0F0F0Fu) | ((ch.y >> 2) & 0x30303030u);
        M = ((ch.w >> 4) & 0x0F0F0F0Fu) | ((ch.z >> 2) & 0x30303030u);
      }
      const float d = __half2float(__ushort_as_half((unsigned short)(ch.x & 0xffff)));
      const float dmin = __half2float(__ushort_as_half((unsigned short)(ch.x >> 16)));
      const int k0 = (2 * j) & 3;
      const float dsl = __fmul_rn(d, nib(SC, k0)), dml = __fmul_rn(dmin, nib(M, k0));
      const float dsh = __fmul_rn(d, nib(SC, k0 + 1)), dmh = __fmul_rn(dmin, nib(M, k0 + 1));
#pragma unroll
      for (int k = 0; k < NB; ++k) {
        acc[k] = __fadd_rn(acc[k], __fsub_rn(__fmul_rn(dsl, dl[k]), __fmul_rn(dml, sum_lo[k])));
        acc[k] = __fadd_rn(acc[k], __fsub_rn(__fmul_rn(dsh, dh[k]), __fmul_rn(dmh, sum_hi[k])));
      }
    }
  }
#pragma unroll
  for (int k = 0; k < NB; ++k) {
    float v = __fadd_rn(acc[k], __shfl_xor_sync(0xffffffffu, acc[k], 8));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 16));
    if (lane < kQ4v2Rows) red[warp][k][lane] = v;
  }
  __syncthreads();
  if (tid < kQ4v2Rows && row < n_rows) {
#pragma unroll
    for (int k = 0; k < NB; ++k) {
      if (b0 + k * es >= nbatch) break;
      float t = red[0][k][tid];
      for (int q = 1; q < (int)(blockDim.x >> 5); ++q) t = __fadd_rn(t, red[q][k][tid]);
      y[(int64_t)(b0 + k * es) * y_stride + row] = t;
    }
  }
}

// Groups per CTA for a rows x (nb blocks) matrix: each thread takes about the items that let all threads of
// one matrix be resident on a reference device of 132 SMs at ~768 threads each (an H200), rounded to whole
// warps, at most 64. A function of the shape alone (not of the device or batch): the order of sums is the
// same everywhere, and suites/gpu emulates it on the host (its groups() must stay equal to this).
int q4k_v2_groups(int64_t n_rows, int64_t nb) {
  const int64_t items = nb * 4, ctas = (n_rows + kQ4v2Rows - 1) / kQ4v2Rows;
  const int64_t slots = 132 * 768;
  const int64_t per = std::max<int64_t>(1, (items * ctas * kQ4v2Rows + slots - 1) / slots);
  int64_t G = (items + per - 1) / per;
  G = (G + 3) / 4 * 4;
  return (int)std::min<int64_t>(std::max<int64_t>(G, 4), kQ4v2MaxThreads / kQ4v2Rows);
}

bool gemv_q4k_v2(const void* d_w, int64_t n_rows, int64_t ncols, const int32_t* d_ids, int64_t w_count, int64_t mat_stride,
                 const float* d_x, int64_t x_stride, float* d_y, int64_t y_stride, int64_t batch) {
  const int64_t nb = ncols / 256;
  if (nb > (1 << 24) || (reinterpret_cast<uintptr_t>(d_w) % 16) || mat_stride % 16 || (reinterpret_cast<uintptr_t>(d_x) % 16) ||
      x_stride % 4 || batch > 65535)
    return false;
  const int G = q4k_v2_groups(n_rows, nb);
  // One matrix for the whole batch (batched decode): kQ4v2MaxX x per CTA, each weight decoded once for them.
  // Per-head matrices (entry b on matrix b % w_count: W_UV in a decode step of several tokens) the same way,
  // each pass on one matrix: one entry per pass decoded each head's matrix 64 times at B = 64, once per token.
  const bool shared = !d_ids && (mat_stride == 0 || w_count == 1) && batch > 1;
  const bool per_mat = !d_ids && !shared && w_count > 1 && batch >= 2 * w_count;
  const int es = per_mat ? (int)w_count : 1;  // w_count < batch <= 65535 where per_mat
  const int64_t nx = shared || per_mat ? kQ4v2MaxX : 1;
  const int64_t tokens = (batch + es - 1) / es;  // entries per matrix (per_mat), or the batch
  const int64_t passes = es * ((tokens + nx - 1) / nx);
  const unsigned blocks = ceil_div(n_rows, kQ4v2Rows);
  const bool bm = blocks <= 65535;  // batch-major grid where the row blocks fit grid.y
  const dim3 grid = bm ? dim3((unsigned)passes, blocks) : dim3(blocks, (unsigned)passes);
  const uint8_t* w = static_cast<const uint8_t*>(d_w);
  const int T = G * kQ4v2Rows;
  if (shared || per_mat)
    gemv_q4k_v2_kernel<kQ4v2MaxX, 1><<<grid, T, 0, cur_stream()>>>(w, n_rows, (int)nb, d_ids, w_count, mat_stride, d_x, x_stride,
                                                                   d_y, y_stride, batch, bm, es);
  else
    gemv_q4k_v2_kernel<1, 1><<<grid, T, 0, cur_stream()>>>(w, n_rows, (int)nb, d_ids, w_count, mat_stride, d_x, x_stride, d_y,
                                                           y_stride, batch, bm, es);
  MLACONF_CUDA_LAUNCH_CHECK("gemv_q4k_v2_kernel");
  return true;
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

// Matrix of batch entry b: ids[b] when ids is given, else b % w_count.
void gemv_impl(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const float* d_x, float* d_y, int64_t batch,
               int64_t w_count, int64_t w_stride, int64_t x_stride, int64_t y_stride, const int32_t* d_ids = nullptr,
               const void* d_w_alt = nullptr, GemvKernel k = GemvKernel::Default) {
  if (!can_dequantize(t)) throw NotSupported(std::string("cuda::gemv: unsupported weight type ") + type_name(t));
  if (n_rows <= 0 || ncols <= 0 || batch <= 0) throw InputError("cuda::gemv: empty shape");
  const auto& tr = traits(t);
  const int64_t rb = row_bytes(t, ncols);  // throws InputError when ncols is not a block multiple
  // The negative control "gemv-drop-tail": a grid sized by n_rows / 8 instead of ceil(n_rows / 8).
  if (active_fault() == Fault::GemvDropTail) n_rows -= n_rows % 8;
  if (n_rows == 0) return;
  // Q4_K and Q6_K on the tensor cores: by the shape alone in the default (one kernel whatever the batch:
  // batched decode needs each row's bits independent of it), at every shape in GemvKernel::Mma.
  if ((k == GemvKernel::Mma || (k == GemvKernel::Default && gemv_mma_by_default(t, n_rows, ncols))) &&
      gemv_mma(t, d_w, n_rows, ncols, d_ids, w_count, w_stride, d_x, x_stride, d_y, y_stride, batch, d_w_alt))
    return;
  // Only the tensor-core GEMV takes an id of -1 (gemv_experts_mma_ok tells the caller beforehand).
  if (d_w_alt) throw InputError("cuda::gemv_experts: a matrix for id -1 needs the tensor-core GEMV (gemv_experts_mma_ok)");
  // Q4_K: the vectorised SIMT kernel, for every batch shape.
  if (t == GgmlType::Q4_K && gemv_q4k_v2(d_w, n_rows, ncols, d_ids, w_count, w_stride, d_x, x_stride, d_y, y_stride, batch))
    return;
  // F32, F16, BF16 (the router): the float GEMV (gemv_float.cu), rows split over a whole CTA.
  if (gemv_float(t, d_w, n_rows, ncols, d_ids, w_count, w_stride, d_x, x_stride, d_y, y_stride, batch)) return;
  // Q8_0, Q6_K, Q5_K and the other 32/256-value block types: the block-streaming kernel (gemv_blocks.cu),
  // which decodes each weight once for all batch entries that share its matrix.
  if (gemv_blocks(t, d_w, n_rows, ncols, d_ids, w_count, w_stride, d_x, x_stride, d_y, y_stride, batch)) return;
  const unsigned blocks = ceil_div(n_rows, kGemvThreads / 32);
  const bool bm = blocks <= 65535;  // batch-major grid (weights shared by the batch come from L2)
  const dim3 grid = bm ? dim3((unsigned)batch, blocks) : dim3(blocks, (unsigned)batch);
  gemv_kernel<<<grid, kGemvThreads, 0, cur_stream()>>>((int)t, static_cast<const uint8_t*>(d_w), n_rows, ncols, rb, (int)tr.block_size,
                                      (int)tr.type_size, w_count, w_stride, d_ids, d_x, x_stride, d_y, y_stride, bm);
  MLACONF_CUDA_LAUNCH_CHECK("gemv_kernel");
}

}  // namespace

void gemv(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const float* d_x, float* d_y, int64_t batch,
          int64_t w_batch_stride, int64_t x_stride, int64_t y_stride, GemvKernel k) {
  gemv_impl(t, d_w, n_rows, ncols, d_x, d_y, batch, batch, w_batch_stride, x_stride, y_stride, nullptr, nullptr, k);
}

void gemv_experts(GgmlType t, const void* d_w, int64_t expert_stride, const int32_t* d_ids, int64_t n, int64_t n_rows,
                  int64_t ncols, const float* d_x, int64_t x_stride, float* d_y, int64_t y_stride, const void* d_w_alt,
                  GemvKernel k) {
  if (n == 0) return;
  gemv_impl(t, d_w, n_rows, ncols, d_x, d_y, n, n, expert_stride, x_stride, y_stride, d_ids, d_w_alt, k);
}

void gemv_experts_grouped(GgmlType t, const void* d_w, int64_t expert_stride, int64_t n_rows, int64_t ncols,
                          const int32_t* d_groups, const int32_t* d_n_groups, int64_t n, const float* d_x, int64_t x_stride,
                          float* d_y, int64_t y_stride, const int32_t* d_out_rows, GemvKernel k) {
  if (n == 0) return;
  if (!gemv_experts_mma_ok(t, n_rows, ncols, k)) throw InputError("cuda::gemv_experts_grouped: needs the tensor-core GEMV (gemv_experts_mma_ok)");
  const ExpertGroupsArg g{d_groups, d_n_groups, d_out_rows};
  // w_count (1) is unused by grouped passes: each takes its expert from the table (the router's ids, unchecked).
  if (!gemv_mma(t, d_w, n_rows, ncols, nullptr, 1, expert_stride, d_x, x_stride, d_y, y_stride, n, nullptr, &g))
    throw InputError("cuda::gemv_experts_grouped: shape or alignment the tensor-core GEMV does not take");
}

bool gemv_experts_mma_ok(GgmlType t, int64_t n_rows, int64_t ncols, GemvKernel k) {
  return (t == GgmlType::Q4_K || t == GgmlType::Q6_K) && ncols % 256 == 0 &&
         (k == GemvKernel::Mma || (k == GemvKernel::Default && gemv_mma_by_default(t, n_rows, ncols)));
}

void apply_wuv(GgmlType t, const void* d_wuv, int64_t v, int64_t d_v, const float* d_latent, int64_t T, int64_t H,
               float* d_out, GemvKernel k) {
  // batch b = t * H + h uses head h's matrix (v rows of d_v values).
  if (T == 0) return;
  gemv_impl(t, d_wuv, v, d_v, d_latent, d_out, T * H, H, row_bytes(t, d_v) * v, d_v, v, nullptr, nullptr, k);
}

void gemv_per_head(GgmlType t, const void* d_w, int64_t rows, int64_t cols, int64_t H, const float* d_x, int64_t x_stride,
                   float* d_y, int64_t y_stride, int64_t batch, GemvKernel k) {
  if (batch == 0) return;
  gemv_impl(t, d_w, rows, cols, d_x, d_y, batch, H, row_bytes(t, cols) * rows, x_stride, y_stride, nullptr, nullptr, k);
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
