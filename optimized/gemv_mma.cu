// mlaconf optimized: dequant GEMV on the tensor cores for Q4_K and Q6_K (the GLM-5 quants' expert,
// projection and output-head types).
//
// Why: on the H200 the SIMT kernels ran these at 16-28% of copy bandwidth, limited by instructions: the
// Q6_K block kernel issued 19 instructions per weight per lane (ncu: issue slots 79% busy, the output head
// at 27% of its floor), the Q4_K kernel by L1 wavefronts (per-lane 16-byte loads over 8 rows). Here a warp
// takes 16 rows (the mma's M) and streams their blocks through shared memory with 16-byte cp.async (a row's
// block is contiguous, so a warp's copy touches few cache lines); each lane turns 4 values of each of its
// two rows into bf16 (exact: the integer q of a 4- or 6-bit code, 128 + q built in the mantissa and 128 or
// 160 subtracted) and one mma.sync m16n8k16 multiplies 16 rows x 16 values by 8 columns of x.
//
// Precision: x (fp32) is split into three bf16 terms hi + mid + lo (each the rounding of what the previous
// ones left, so their sum is x to ~2^-25 relative; bf16 keeps fp32's exponent range, so no scaling), and
// the 8 columns of an mma are (2 x) x (3 terms) + 2 zero columns; the integer q times a bf16 term is exact
// in the tensor core's fp32 accumulation. Per sub-block (16 values for Q6_K, 32 for Q4_K) the fp32 partial
// is multiplied by its integer scale; per block by d (and, Q4_K, minus dmin * sum_sb m * sum(x over sb)).
// The three terms of a column are added last: y = (hi + mid) + lo. Error against float64: the fp32
// roundings of the SIMT kernels' size (suites/gpu test_gemv_mma measures it); the bits differ from the SIMT
// kernels'. The default for matrices of at least 1024 x 2048 (gemv_mma_by_default: on the H200 faster than
// the SIMT kernels there at B = 8, and for Q6_K at B = 1; docs/PERF_H200_gemv_blocks.md v4).
//
// Bit-identity across batches: a column's result depends only on its own x and the rows' weights (an mma
// output element is the same function of its A row and B column whatever the other columns hold); the
// split of K over warps (ks) is a function of the matrix shape alone, and the warps' partials are added
// in warp order. So batched decode gives every sequence the bits of decoding it alone.
//
// Only sm_90 / sm_120 instructions: mma.sync (bf16), cp.async; at most 69.6 KB of dynamic shared memory.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"
#include "optimized/dequant_elem.cuh"
#include "optimized/faults.h"
#include "optimized/gemv_mma.cuh"
#include "optimized/mma.cuh"

namespace mlaconf::cuda {
namespace {

// Warps per CTA: kWarps, or kWarpsSmall for matrices of up to 128 row tiles (one tile per CTA, K over
// kWarpsSmall warps).
constexpr int kWarps = 8, kWarpsSmall = 4;
constexpr int kMaxCg = 4;  // column groups per pass: 2 x each, so up to 8 x per pass

// ---- x as bf16 terms (one launch per GEMV call) ----
// Slot s of x (a batch entry's vector) is column group s / 2, columns 3 (s % 2) + term; columns 6 and 7
// are zero. xi: [groups][K / 16][8 columns][16 values] bf16, so that the B fragment of one k-step (16
// values) for all 32 lanes is 256 contiguous bytes. xs: [groups][K / 32][8] fp32, the sum of x over each
// 32-value sub-block in the column of the slot's hi term, zero in the others (Q4_K's dmin term).
__global__ void split_x_kernel(const float* __restrict__ x, int64_t x_stride, int64_t K, int64_t ntok,
                               __nv_bfloat16* __restrict__ xi, float* __restrict__ xs, bool hi_only) {
  const int64_t pos = (int64_t)blockIdx.x * 256 + threadIdx.x;
  const int64_t s = blockIdx.y;  // grid.y: ntok rounded up to even; the padding slot is zero
  const float v = s < ntok ? x[s * x_stride + pos] : 0.f;
  const __nv_bfloat16 hi = __float2bfloat16_rn(v);
  const float r1 = __fsub_rn(v, __bfloat162float(hi));  // exact: v and hi agree to within hi's ulp
  const __nv_bfloat16 mid = __float2bfloat16_rn(r1);
  const float r2 = __fsub_rn(r1, __bfloat162float(mid));
  const __nv_bfloat16 lo = __float2bfloat16_rn(r2);
  const __nv_bfloat16 zero = __float2bfloat16_rn(0.f);
  const int64_t cg = s >> 1, c0 = 3 * (s & 1);
  __nv_bfloat16* o = xi + (cg * (K / 16) + pos / 16) * 128 + (pos & 15);
  o[(c0 + 0) * 16] = hi;
  o[(c0 + 1) * 16] = hi_only ? zero : mid;  // the fault gemv-x-bf16
  o[(c0 + 2) * 16] = hi_only ? zero : lo;
  o[(6 + (s & 1)) * 16] = zero;
  // The 32 lanes hold one sub-block: a butterfly gives every lane the same sum (fadd commutes).
  float sum = v;
#pragma unroll
  for (int off = 16; off; off >>= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, off));
  if ((threadIdx.x & 31) == 0) {
    float* q = xs + (cg * (K / 32) + pos / 32) * 8;
    q[c0] = sum;
    q[c0 + 1] = 0.f;
    q[c0 + 2] = 0.f;
    q[6 + (s & 1)] = 0.f;
  }
}

// ---- the GEMV ----
struct MmaArgs {
  const uint8_t* w;
  int64_t n_rows, row_bytes;
  int nb;      // blocks (256 values) per row
  int rt, ks;  // row tiles (16 rows) per CTA, warps per row tile splitting K; rt * ks == the CTA's warps
  const int32_t* ids;
  int64_t w_count, w_stride, batch;
  bool shared;  // one matrix for the batch: entry group y (entries 8 y .. 8 y + 7, slots = entries)
  int ny;       // shared: entry groups, the fastest-varying part of blockIdx.x
  bool one_x;   // (not shared) every entry reads x slot 0
  const uint2* xi;
  const float* xs;
  float* y;
  int64_t y_stride;
};

template <int TYPE> struct MmaShape;
// ts: block bytes; words: 16-byte words a row's block can span; slot: bytes per staged row (a multiple of
// 16 that is 16 mod 128, so the 8 rows x 4 lanes of a fragment load hit 32 different banks).
template <> struct MmaShape<kQ4_K> { static constexpr int ts = 144, words = 9, slot = 144, stages = 3; };
template <> struct MmaShape<kQ6_K> { static constexpr int ts = 210, words = 14, slot = 272, stages = 2; };

template <int TYPE>
constexpr size_t smem_bytes(int warps) {
  return (size_t)warps * MmaShape<TYPE>::stages * 16 * MmaShape<TYPE>::slot;
}

// Not volatile: a pure function of its operands, so the compiler may schedule the x loads ahead of it.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint2 b) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
}

// bf16 128's high byte in every byte. A __constant__ (not a literal) so that PRMT takes it from the constant
// bank and the selector as its immediate: with both literal, the compiler re-materialised the selector in
// a register before every PRMT (6 extra instructions per k-step).
__constant__ uint32_t c_bf128_bytes = 0x43434343u;

// Bytes 0,1 (sel 0x4140) or 2,3 (0x4342) of q (each < 128) as two bf16 128 + q, minus `off` (bf16x2 bits).
__device__ __forceinline__ uint32_t q_pair(uint32_t q, unsigned sel, uint32_t off) {
  const uint32_t v = __byte_perm(q, c_bf128_bytes, sel);
  const __nv_bfloat162 r = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&v), *reinterpret_cast<const __nv_bfloat162*>(&off));
  return *reinterpret_cast<const uint32_t*>(&r);
}
constexpr uint32_t kBf128 = 0x43004300u, kBf160 = 0x43204320u;


// A row's block in shared memory as aligned 32-bit words and the funnel shift that undoes its misalignment
// (Q6_K's 210-byte blocks start at any even byte): one LOP3 per row and block, and every word after it at a
// fixed offset (LDS with an immediate; v3 recomputed the alignment of every word, ~6 instructions each).
struct Words {
  const uint32_t* w;
  unsigned sh;
  __device__ __forceinline__ explicit Words(const uint8_t* p) {
    const unsigned mis = (unsigned)reinterpret_cast<uintptr_t>(p) & 3u;
    w = reinterpret_cast<const uint32_t*>(p - mis);
    sh = 8 * mis;
  }
  // The u32 at byte offset 4 i of the block (i a compile-time constant after unrolling, plus a lane term).
  __device__ __forceinline__ uint32_t at(int i) const { return __funnelshift_r(w[i], w[i + 1], sh); }
};

// 2^23's exponent bytes, a __constant__ for the reason of c_bf128_bytes (byte_as_float's exp_bytes).
__constant__ uint32_t c_f2p23_bits = 0x4B000000u;

// One Q6_K block (ql[128] qh[64] scales[16] d) of rows g (s0) and g + 8 (s1). Sub-block u (16 values,
// u = 8 half + 2 j + lh) is positions 16 u of the block: lane t takes l = 16 lh + 4 t .. + 3 of its quarter j,
// from ql[64 half + 32 (j & 1) + l] (nibble j / 2) and qh[32 half + l] (bits 2 j). xb: the lane's B fragment
// of the block's first k-step in column group 0 (k-step u at xb[32 u], group c at + c * xg_stride).
template <int NCG>
__device__ __forceinline__ void block_q6k(const uint8_t* s0, const uint8_t* s1, int t, const uint2* xb,
                                          int64_t xg_stride, float (&acc)[NCG][4]) {
  float bacc[NCG][4];
#pragma unroll
  for (int c = 0; c < NCG; ++c) bacc[c][0] = bacc[c][1] = bacc[c][2] = bacc[c][3] = 0.f;
  const Words r0(s0), r1(s1);
  // The 16 int8 scales of each row as words, offset to unsigned (x ^ 0x80) for the exact float trick.
  uint32_t scw0[4], scw1[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) scw0[w] = r0.at(48 + w) ^ 0x80808080u, scw1[w] = r1.at(48 + w) ^ 0x80808080u;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
#pragma unroll
    for (int lh = 0; lh < 2; ++lh) {
      const int o = 4 * lh + t;  // word index of l = 16 lh + 4 t
      const uint32_t wa0 = r0.at(16 * hf + o), wb0 = r0.at(16 * hf + 8 + o), h0 = r0.at(32 + 8 * hf + o);
      const uint32_t wa1 = r1.at(16 * hf + o), wb1 = r1.at(16 * hf + 8 + o), h1 = r1.at(32 + 8 * hf + o);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int u = 8 * hf + 2 * j + lh;
        const uint32_t n0 = ((j >= 2) ? (j & 1 ? wb0 : wa0) >> 4 : (j & 1 ? wb0 : wa0)) & 0x0F0F0F0Fu;
        const uint32_t n1 = ((j >= 2) ? (j & 1 ? wb1 : wa1) >> 4 : (j & 1 ? wb1 : wa1)) & 0x0F0F0F0Fu;
        const uint32_t q0 = n0 | ((j == 0 ? h0 << 4 : j == 1 ? h0 << 2 : j == 2 ? h0 : h0 >> 2) & 0x30303030u);
        const uint32_t q1 = n1 | ((j == 0 ? h1 << 4 : j == 1 ? h1 << 2 : j == 2 ? h1 : h1 >> 2) & 0x30303030u);
        const uint32_t a[4] = {q_pair(q0, 0x4140u, kBf160), q_pair(q1, 0x4140u, kBf160), q_pair(q0, 0x4342u, kBf160),
                               q_pair(q1, 0x4342u, kBf160)};
        // The int8 scales (stored ^ 0x80, so unsigned): 128 + sc as a float, minus 128.
        const float sc0 = byte_as_float(scw0[u >> 2], u & 3, 128.f, c_f2p23_bits);
        const float sc1 = byte_as_float(scw1[u >> 2], u & 3, 128.f, c_f2p23_bits);
#pragma unroll
        for (int c = 0; c < NCG; ++c) {  // every group: padded with zero x (no branch around the mma)
          float C[4] = {0.f, 0.f, 0.f, 0.f};
          mma_bf16(C, a, __ldg(xb + c * xg_stride + 32 * u));
          bacc[c][0] = fmaf(sc0, C[0], bacc[c][0]);
          bacc[c][1] = fmaf(sc0, C[1], bacc[c][1]);
          bacc[c][2] = fmaf(sc1, C[2], bacc[c][2]);
          bacc[c][3] = fmaf(sc1, C[3], bacc[c][3]);
        }
      }
    }
  const float d0 = ld_f16_hw(s0 + 208), d1 = ld_f16_hw(s1 + 208);
#pragma unroll
  for (int c = 0; c < NCG; ++c) {
    acc[c][0] = fmaf(d0, bacc[c][0], acc[c][0]);
    acc[c][1] = fmaf(d0, bacc[c][1], acc[c][1]);
    acc[c][2] = fmaf(d1, bacc[c][2], acc[c][2]);
    acc[c][3] = fmaf(d1, bacc[c][3], acc[c][3]);
  }
}

// One Q4_K block (d dmin scales[12] qs[128]) of rows g (s0, 16-byte aligned) and g + 8 (s1). Chunk c's 32
// qs bytes hold sub-block 2c (low nibbles) and 2c + 1 (high); k-step (sub-block sb, half s) is positions
// 16 s .. 16 s + 15 of sb, lane t taking qs byte 32 c + 16 s + 4 t .. + 3.
template <int NCG>
__device__ __forceinline__ void block_q4k(const uint8_t* s0, const uint8_t* s1, int64_t kbase, int64_t sbase, int t,
                                          const uint2* xg, int64_t xg_stride, const float2* xsg, int64_t xs_stride,
                                          float (&acc)[NCG][4]) {
  const uint4 h0 = *reinterpret_cast<const uint4*>(s0), h1 = *reinterpret_cast<const uint4*>(s1);
  // ggml's get_scale_min_k4, four sub-blocks per word: (SC, M)[0] for sub-blocks 0-3, [1] for 4-7.
  const uint32_t sc0[2] = {h0.y & 0x3F3F3F3Fu, (h0.w & 0x0F0F0F0Fu) | ((h0.y >> 2) & 0x30303030u)};
  const uint32_t m0[2] = {h0.z & 0x3F3F3F3Fu, ((h0.w >> 4) & 0x0F0F0F0Fu) | ((h0.z >> 2) & 0x30303030u)};
  const uint32_t sc1[2] = {h1.y & 0x3F3F3F3Fu, (h1.w & 0x0F0F0F0Fu) | ((h1.y >> 2) & 0x30303030u)};
  const uint32_t m1[2] = {h1.z & 0x3F3F3F3Fu, ((h1.w >> 4) & 0x0F0F0F0Fu) | ((h1.z >> 2) & 0x30303030u)};
  float bs[NCG][4], bm[NCG][4];
#pragma unroll
  for (int c = 0; c < NCG; ++c)
#pragma unroll
    for (int i = 0; i < 4; ++i) bs[c][i] = bm[c][i] = 0.f;
#pragma unroll
  for (int ch = 0; ch < 4; ++ch) {
    const uint32_t w00 = *reinterpret_cast<const uint32_t*>(s0 + 16 + 32 * ch + 4 * t);
    const uint32_t w01 = *reinterpret_cast<const uint32_t*>(s0 + 32 + 32 * ch + 4 * t);
    const uint32_t w10 = *reinterpret_cast<const uint32_t*>(s1 + 16 + 32 * ch + 4 * t);
    const uint32_t w11 = *reinterpret_cast<const uint32_t*>(s1 + 32 + 32 * ch + 4 * t);
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int sb = 2 * ch + hi;
      float C[NCG][4];
#pragma unroll
      for (int c = 0; c < NCG; ++c) C[c][0] = C[c][1] = C[c][2] = C[c][3] = 0.f;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const uint32_t n0 = (hi ? (s ? w01 : w00) >> 4 : (s ? w01 : w00)) & 0x0F0F0F0Fu;
        const uint32_t n1 = (hi ? (s ? w11 : w10) >> 4 : (s ? w11 : w10)) & 0x0F0F0F0Fu;
        const uint32_t a[4] = {q_pair(n0, 0x4140u, kBf128), q_pair(n1, 0x4140u, kBf128), q_pair(n0, 0x4342u, kBf128),
                               q_pair(n1, 0x4342u, kBf128)};
#pragma unroll
        for (int c = 0; c < NCG; ++c) {  // every group: padded with zero x (no branch around the mma)
          mma_bf16(C[c], a, __ldg(xg + c * xg_stride + (kbase + 2 * sb + s) * 32));
        }
      }
      const float f_sc0 = byte_as_float(sc0[sb >> 2], sb & 3, 0.f), f_m0 = byte_as_float(m0[sb >> 2], sb & 3, 0.f);
      const float f_sc1 = byte_as_float(sc1[sb >> 2], sb & 3, 0.f), f_m1 = byte_as_float(m1[sb >> 2], sb & 3, 0.f);
#pragma unroll
      for (int c = 0; c < NCG; ++c) {
        const float2 X = __ldg(xsg + c * xs_stride + (sbase + sb) * 4);
        bs[c][0] = fmaf(f_sc0, C[c][0], bs[c][0]);
        bs[c][1] = fmaf(f_sc0, C[c][1], bs[c][1]);
        bs[c][2] = fmaf(f_sc1, C[c][2], bs[c][2]);
        bs[c][3] = fmaf(f_sc1, C[c][3], bs[c][3]);
        bm[c][0] = fmaf(f_m0, X.x, bm[c][0]);
        bm[c][1] = fmaf(f_m0, X.y, bm[c][1]);
        bm[c][2] = fmaf(f_m1, X.x, bm[c][2]);
        bm[c][3] = fmaf(f_m1, X.y, bm[c][3]);
      }
    }
  }
  const float d0 = __half2float(__ushort_as_half((unsigned short)(h0.x & 0xffff)));
  const float dm0 = __half2float(__ushort_as_half((unsigned short)(h0.x >> 16)));
  const float d1 = __half2float(__ushort_as_half((unsigned short)(h1.x & 0xffff)));
  const float dm1 = __half2float(__ushort_as_half((unsigned short)(h1.x >> 16)));
#pragma unroll
  for (int c = 0; c < NCG; ++c) {
    acc[c][0] = fmaf(-dm0, bm[c][0], fmaf(d0, bs[c][0], acc[c][0]));
    acc[c][1] = fmaf(-dm0, bm[c][1], fmaf(d0, bs[c][1], acc[c][1]));
    acc[c][2] = fmaf(-dm1, bm[c][2], fmaf(d1, bs[c][2], acc[c][2]));
    acc[c][3] = fmaf(-dm1, bm[c][3], fmaf(d1, bs[c][3], acc[c][3]));
  }
}

// grid: shared matrix, ceil(tiles / rt) * ny (row-tile block tb = blockIdx.x / ny, entry group blockIdx.x % ny);
// else (ceil(tiles / rt), batch). Warp w: row tile tb * rt + w / ks, blocks [nb * kp / ks, nb * (kp + 1) / ks)
// of it for kp = w % ks. W warps per CTA (rt * ks == W).
template <int TYPE, int NCG, int W>
__global__ void __launch_bounds__(32 * W, 16 / W) gemv_mma_kernel(MmaArgs a) {
  using S = MmaShape<TYPE>;
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int rtl = warp / a.ks, kp = warp % a.ks;
  // Shared matrix: the entry groups of a row tile are adjacent CTAs, so that they run together and all but
  // the first read the tile's weights from L2 (B > 8 reads the matrix from DRAM about once, not B / 8 times).
  const int64_t tb = a.shared ? (int64_t)blockIdx.x / a.ny : (int64_t)blockIdx.x;
  const int64_t yg = a.shared ? (int64_t)blockIdx.x % a.ny : (int64_t)blockIdx.y;
  const int64_t tile = tb * a.rt + rtl;
  const bool tile_ok = tile * 16 < a.n_rows;
  const int64_t e0 = a.shared ? yg * 8 : yg;
  const int64_t mat = a.ids ? (int64_t)a.ids[e0] : (a.shared ? 0 : e0 % a.w_count);
  const int64_t slot = a.shared ? e0 : (a.one_x ? 0 : e0);  // the x slot of column group 0's first token
  const int64_t left = a.batch - e0 < 8 ? a.batch - e0 : 8;
  const int ncg = a.shared ? (int)((left + 1) / 2 < NCG ? (left + 1) / 2 : NCG) : 1;
  const int64_t K16 = (int64_t)a.nb * 16;
  const uint2* xg = a.xi + ((slot >> 1) * K16 * 8 + g) * 4 + t;  // this lane's B fragment of k-step 0
  const float2* xsg = reinterpret_cast<const float2*>(a.xs) + (slot >> 1) * (int64_t)a.nb * 8 * 4 + t;
  const uint8_t* wm = a.w + mat * a.w_stride;
  const uint8_t* mat_end = wm + a.n_rows * a.row_bytes;
  const int64_t rl0 = min(tile * 16 + g, a.n_rows - 1), rl1 = min(tile * 16 + g + 8, a.n_rows - 1);
  const int b_lo = (int)((int64_t)a.nb * kp / a.ks), b_hi = (int)((int64_t)a.nb * (kp + 1) / a.ks);
  uint8_t* stg = smem + (size_t)warp * S::stages * 16 * S::slot;  // [stage][16 rows][slot]

  // Block b of the warp's 16 rows into stage st by 16-byte cp.async: lane l copies aligned word l % 16 of
  // rows l / 16, l / 16 + 2, ..., l / 16 + 14, so one instruction reads two rows' consecutive words (a few
  // cache lines). The v4 mapping (lanes 2 r and 2 r + 1: the two halves of row r) touched 32 lines per
  // instruction, 8x the ideal L1 wavefronts, and the shared-memory queue was the head's largest stall (ncu).
  // The matrix's last word by byte loads (nothing past the matrix is read, whatever the block alignment).
  const int cw = lane & 15, ch = lane >> 4;
  const bool full_tile = (tile + 1) * 16 <= a.n_rows;
  const uint8_t* row_ch = wm + min(tile * 16 + ch, a.n_rows - 1) * a.row_bytes;
  const uint8_t* row_last = wm + min(tile * 16 + 15, a.n_rows - 1) * a.row_bytes;
  uint8_t* slot_ch = stg + (size_t)ch * S::slot + 16 * cw;
  auto align16 = [](const uint8_t* p) {
    return reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(p) & ~(uintptr_t)15);
  };
  auto issue = [&](int b, int st) {
    if (cw >= S::words) return;
    uint8_t* d0 = slot_ch + (size_t)st * 16 * S::slot;
    const int64_t bo = (int64_t)b * S::ts;
    // The usual case, one test per block: all 16 rows exist and the last one's words lie inside the matrix
    // (rows ascend, so every other row's do too). A word past a block's end lands in the slot's headroom.
    if (full_tile && mat_end - align16(row_last + bo) >= 16 * S::words) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        cp_async_16(smem_addr(d0 + (size_t)2 * i * S::slot), align16(row_ch + 2 * i * a.row_bytes + bo) + 16 * cw, 16);
      return;
    }
#pragma unroll 1
    for (int i = 0; i < 8; ++i) {
      const uint8_t* src = wm + min(tile * 16 + 2 * i + ch, a.n_rows - 1) * a.row_bytes + bo;
      const uint8_t* w0 = align16(src);
      if (cw >= (int)((src + S::ts - w0 + 15) >> 4)) continue;
      const uint8_t* p = w0 + 16 * cw;
      uint8_t* d = d0 + (size_t)2 * i * S::slot;
      if (mat_end - p >= 16) {
        cp_async_16(smem_addr(d), p, 16);
      } else {
        for (int q = 0; q < 16; ++q) d[q] = p + q < mat_end ? p[q] : (uint8_t)0;
      }
    }
  };

  float acc[NCG][4];
#pragma unroll
  for (int c = 0; c < NCG; ++c) acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.f;
  if (tile_ok) {
#pragma unroll
    for (int s = 0; s < S::stages - 1; ++s) {
      if (b_lo + s < b_hi) issue(b_lo + s, s);
      cp_async_commit();
    }
    for (int b = b_lo; b < b_hi; ++b) {
      const int nx = b + S::stages - 1;
      if (nx < b_hi) issue(nx, (nx - b_lo) % S::stages);
      cp_async_commit();  // possibly empty: keeps the wait count uniform
      cp_async_wait<S::stages - 1>();
      __syncwarp();
      const int st = (b - b_lo) % S::stages;
      const uintptr_t o0 = reinterpret_cast<uintptr_t>(wm + rl0 * a.row_bytes + (int64_t)b * S::ts) & 15;
      const uintptr_t o1 = reinterpret_cast<uintptr_t>(wm + rl1 * a.row_bytes + (int64_t)b * S::ts) & 15;
      const uint8_t* s0 = stg + ((size_t)st * 16 + g) * S::slot + o0;
      const uint8_t* s1 = stg + ((size_t)st * 16 + g + 8) * S::slot + o1;
      if constexpr (TYPE == kQ6_K)
        block_q6k<NCG>(s0, s1, t, xg + (int64_t)b * 16 * 32, K16 * 32, acc);
      else
        block_q4k<NCG>(s0, s1, (int64_t)b * 16, (int64_t)b * 8, t, xg, K16 * 32, xsg, (int64_t)a.nb * 32, acc);
      __syncwarp();  // the stage is refilled `stages` blocks on
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the staging memory becomes the reduction's

  // The ks warps of a row tile: partials added in warp order; then per x: (hi + mid) + lo.
  float* red = reinterpret_cast<float*>(smem);  // [W][NCG][4][32]
  float* vals = red + W * NCG * 4 * 32;          // [rt][NCG][8 columns][16 rows]
#pragma unroll
  for (int c = 0; c < NCG; ++c)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[((warp * NCG + c) * 4 + i) * 32 + lane] = acc[c][i];
  __syncthreads();
  if (kp != 0 || !tile_ok) return;
#pragma unroll
  for (int c = 0; c < NCG; ++c)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float v = red[((warp * NCG + c) * 4 + i) * 32 + lane];
      for (int k = 1; k < a.ks; ++k) v = __fadd_rn(v, red[(((warp + k) * NCG + c) * 4 + i) * 32 + lane]);
      vals[((rtl * NCG + c) * 8 + 2 * t + (i & 1)) * 16 + g + 8 * (i >> 1)] = v;
    }
  __syncwarp();
  const int row = lane & 15, tk = lane >> 4;
  const int64_t rowg = tile * 16 + row;
  if (rowg >= a.n_rows) return;
#pragma unroll
  for (int c = 0; c < NCG; ++c) {
    if (c >= ncg) break;
    int64_t e;
    if (a.shared) {
      e = e0 + 2 * c + tk;
      if (e >= a.batch) continue;
    } else {
      if (tk != (int)(slot & 1)) continue;
      e = e0;
    }
    const float* v = vals + (rtl * NCG + c) * 8 * 16;
    a.y[e * a.y_stride + rowg] = __fadd_rn(__fadd_rn(v[(3 * tk) * 16 + row], v[(3 * tk + 1) * 16 + row]), v[(3 * tk + 2) * 16 + row]);
  }
}

template <int TYPE, int NCG, int W>
void launch_w(const MmaArgs& a, dim3 grid) {
  static bool attr[64] = {};  // per instantiation and device
  const int dev = current_device();
  if (dev >= 64) throw CudaError("gemv_mma: device ordinal beyond 63");
  if (!attr[dev]) {
    MLACONF_CUDA_CHECK(cudaFuncSetAttribute(gemv_mma_kernel<TYPE, NCG, W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem_bytes<TYPE>(W)));
    attr[dev] = true;
  }
  gemv_mma_kernel<TYPE, NCG, W><<<grid, 32 * W, smem_bytes<TYPE>(W), cur_stream()>>>(a);
  MLACONF_CUDA_LAUNCH_CHECK("gemv_mma_kernel");
}
template <int TYPE, int NCG>
void launch(const MmaArgs& a, dim3 grid) {
  if (a.rt * a.ks == kWarpsSmall)
    launch_w<TYPE, NCG, kWarpsSmall>(a, grid);
  else
    launch_w<TYPE, NCG, kWarps>(a, grid);
}

}  // namespace

bool gemv_mma_by_default(GgmlType t, int64_t n_rows, int64_t ncols) {
  return (t == GgmlType::Q4_K || t == GgmlType::Q6_K) && n_rows >= 1024 && ncols >= 2048;
}

bool gemv_mma(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const int32_t* d_ids, int64_t w_count,
              int64_t w_stride, const float* d_x, int64_t x_stride, float* d_y, int64_t y_stride, int64_t batch) {
  if (t != GgmlType::Q4_K && t != GgmlType::Q6_K) return false;
  if (n_rows <= 0 || batch <= 0 || w_count <= 0 || ncols % 256 || ncols / 256 > (1 << 24)) return false;
  if ((reinterpret_cast<uintptr_t>(d_w) % 16) || w_stride % 16 || x_stride < 0) return false;
  const bool shared = !d_ids && (w_stride == 0 || w_count == 1);
  if (!shared && batch > 65535) return false;
  const int64_t K = ncols, nb = ncols / 256;
  // x slots: a shared matrix gives every entry its own (even when x_stride is 0); experts at one token
  // (x_stride 0) read one.
  const bool one_x = !shared && x_stride == 0;
  const int64_t ntok = one_x ? 1 : batch, ny = shared ? (batch + 7) / 8 : 0;
  const int ncg = shared ? (int)std::min<int64_t>(kMaxCg, (batch + 1) / 2) : 1;  // column groups per pass (NCG)
  // Column groups hold 2 slots each. A shared pass reads NCG groups from 4 y on, so past the last entry
  // they are padded with zero x (the kernel never branches around an mma).
  const int64_t groups = shared ? (ny == 1 ? ncg : kMaxCg * ny) : (ntok + 1) / 2;
  if (2 * groups > 65535 || (shared && (n_rows + 15) / 16 * ny > 0x7fffffff)) return false;
  auto* xi = static_cast<__nv_bfloat16*>(scratch(5, (size_t)groups * K * 16));
  auto* xs = static_cast<float*>(scratch(6, (size_t)groups * (K / 32) * 32));
  split_x_kernel<<<dim3((unsigned)(K / 256), (unsigned)(2 * groups)), 256, 0, cur_stream()>>>(d_x, x_stride, K, ntok, xi, xs,
                                                                                              active_fault() == Fault::GemvXBf16);
  MLACONF_CUDA_LAUNCH_CHECK("split_x_kernel");

  // Row tiles per CTA from the shape alone (so the split of K, hence each row's order of sums, never
  // depends on the batch): at least ~8 warps per SM of a 132-SM device, K split over up to 8 warps. Up to
  // 128 tiles (2048 rows: an expert's gate and up, q_a) K is split over 4 warps, not 8, in CTAs of 4 warps
  // (one tile each): measured on the H200 (docs/PERF_H200_gemv_blocks.md v4), the 4-way split was 22 %
  // faster for the experts by id at B = 8 and 32 (each warp streams 6 blocks instead of 3) and slower for
  // one such matrix alone at B = 1 (the split's bits do not depend on the CTA's size).
  const int64_t tiles = (n_rows + 15) / 16;
  const int rt = tiles >= 132 * 8 ? 8 : tiles >= 132 * 4 ? 4 : tiles >= 132 * 2 ? 2 : 1;
  const int ks = tiles > 128 ? kWarps / rt : kWarpsSmall;
  MmaArgs a{static_cast<const uint8_t*>(d_w), n_rows, row_bytes(t, ncols), (int)nb, rt, ks, d_ids, w_count,
            w_stride, batch, shared, (int)ny, one_x, reinterpret_cast<const uint2*>(xi), xs, d_y, y_stride};
  const dim3 grid = shared ? dim3((unsigned)(ceil_div(tiles, rt) * ny)) : dim3(ceil_div(tiles, rt), (unsigned)batch);
  if (t == GgmlType::Q6_K) {
    if (ncg == 1) launch<kQ6_K, 1>(a, grid);
    else if (ncg == 2) launch<kQ6_K, 2>(a, grid);
    else launch<kQ6_K, 4>(a, grid);
  } else {
    if (ncg == 1) launch<kQ4_K, 1>(a, grid);
    else if (ncg == 2) launch<kQ4_K, 2>(a, grid);
    else launch<kQ4_K, 4>(a, grid);
  }
  return true;
}

}  // namespace mlaconf::cuda
