// mlaconf optimized: the tensor-core GEMV's x split (see split_x_kernel): x as two fp16 terms scaled per 256-value
// block, and Q4_K's dmin-term sums as three bf16 terms, in the layout of the GEMV's B fragments.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>

#include "optimized/common.cuh"
#include "optimized/gemv_mma_x.cuh"

namespace mlaconf::cuda {
namespace {

// bf16 terms of the dmin term's sums (three, each the rounding of what the previous ones left: every
// difference exact in fp32).
struct Bf16Terms3 {
  __nv_bfloat16 hi, mid, lo;
};
__device__ __forceinline__ Bf16Terms3 split3_bf16(float v) {
  const __nv_bfloat16 hi = __float2bfloat16_rn(v);
  const float r1 = __fsub_rn(v, __bfloat162float(hi));
  const __nv_bfloat16 mid = __float2bfloat16_rn(r1);
  return {hi, mid, __float2bfloat16_rn(__fsub_rn(r1, __bfloat162float(mid)))};
}

// One CTA per (block of 256 values, slot): both types' x (Q4_K's sc q and Q6_K's q - 32 ride in fp16 A operands,
// so x is fp16 too, whose exponent range needs the scale). x' = x 2^e, e = 15 - E with max |x| (finite values)
// in [2^(E-1), 2^E): every |x'| < 2^15, so hi + lo carry x' to ~2^-22 of itself (down to fp16's subnormals,
// ~2^-39 of the block's largest value); e <= 100 keeps 2^-e a normal float. Inf and NaN pass through (their lo
// is NaN). Slot s is column group s / 4, columns 2 (s % 4) (hi) and + 1 (lo). Writes:
//   xi: [groups][K / 16][8 columns][16 values] fp16, each 4-value group stored (0, 2, 1, 3): lane t's B fragment
//       is 4 t .. 4 t + 3 of a column, and the A fragment takes bytes (0, 2) and (1, 3) of a weight word by one
//       instruction each (block_q4k, block_q6k);
//   xf: [groups][K / 256][4 slots] fp32, 2^-e;
//   xm: (Q4_K, else null) [groups][K / 256][8 columns][4 lanes][4 values] bf16, the B fragments of the dmin
//       term's mma: the unscaled fp32 sum of x over each 32-value sub-block w as three bf16 terms, k = w (first
//       term, column 2 (s % 4); third term, column + 1) and k = 8 + w (second term; zero in the odd column), so
//       lane t's two columns add up to the sums' m-weighted total.
// hi_only (the fault gemv-x-bf16): x as its first 16-bit term, lo zero.
__global__ void split_x_kernel(const float* __restrict__ x, int64_t x_stride, int64_t K, int64_t ntok,
                               __half* __restrict__ xi, float* __restrict__ xf, __nv_bfloat16* __restrict__ xm,
                               bool hi_only) {
  __shared__ float wmax[8];
  pdl_trigger();  // the GEMV may launch now (it waits for x's terms)
  pdl_wait();     // chained: x is the previous kernel's output
  const int64_t blk = blockIdx.x, nb = K / 256, pos = blk * 256 + threadIdx.x;
  const int64_t s = blockIdx.y;  // grid.y: the slots of whole column groups; the padding slots are zero
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float v = s < ntok ? x[s * x_stride + pos] : 0.f;
  float m = fabsf(v) <= FLT_MAX ? fabsf(v) : 0.f;  // NaN and inf do not set the scale
#pragma unroll
  for (int off = 16; off; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (lane == 0) wmax[warp] = m;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 8; ++i) m = fmaxf(m, wmax[i]);
  int E = 0;
  (void)frexpf(m, &E);  // m = f 2^E, f in [0.5, 1); E = 0 for m = 0
  const int e = min(15 - E, 100);  // >= 15 - 128: no finite x' reaches 2^15
  const float xs = __fmul_rn(v, __int_as_float((127 + e) << 23));  // exact: a power of two, x' normal or tiny
  const __half hi = __float2half_rn(xs);
  const __half lo = hi_only ? __float2half_rn(0.f) : __float2half_rn(__fsub_rn(xs, __half2float(hi)));
  const int64_t cg = s / kSlots, col = 2 * (s % kSlots);
  const int p = (int)(pos & 15), q = (p & ~3) | ((p & 1) << 1) | ((p >> 1) & 1);  // (0, 2, 1, 3) in each 4
  __half* o = xi + (cg * (K / 16) + pos / 16) * 128 + col * 16 + q;
  o[0] = hi;
  o[16] = lo;
  if (threadIdx.x == 0) xf[(cg * nb + blk) * kSlots + s % kSlots] = __int_as_float((127 - e) << 23);
  if (!xm) return;
  // Warp w holds sub-block w: a butterfly gives every lane the same sum (fadd commutes).
  float sum = v;
#pragma unroll
  for (int off = 16; off; off >>= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, off));
  if (lane == 0) {
    const Bf16Terms3 t3 = split3_bf16(sum);
    const __nv_bfloat16 zero = __float2bfloat16_rn(0.f);
    // k = w: lane w / 2, value w % 2; k = 8 + w: the same lane, value 2 + w % 2.
    __nv_bfloat16* ev = xm + ((cg * nb + blk) * 8 + col) * 16 + (warp >> 1) * 4 + (warp & 1);
    ev[0] = t3.hi;
    ev[2] = hi_only ? zero : t3.mid;
    ev[16] = hi_only ? zero : t3.lo;  // the odd column
    ev[18] = zero;
  }
}

}  // namespace

void split_x(const float* d_x, int64_t x_stride, int64_t K, int64_t ntok, int64_t groups, __half* xi, float* xf,
             __nv_bfloat16* xm, bool hi_only, bool chain) {
  const dim3 sgrid((unsigned)(K / 256), (unsigned)(kSlots * groups));
  if (chain) launch_dependent(split_x_kernel, sgrid, dim3(256), 0, d_x, x_stride, K, ntok, xi, xf, xm, hi_only);
  else split_x_kernel<<<sgrid, 256, 0, cur_stream()>>>(d_x, x_stride, K, ntok, xi, xf, xm, hi_only);
  MLACONF_CUDA_LAUNCH_CHECK("split_x_kernel");
}

}  // namespace mlaconf::cuda
