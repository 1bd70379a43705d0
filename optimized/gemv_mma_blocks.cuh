// mlaconf optimized: the tensor-core GEMV's pieces below the kernel (gemv_mma.cu): its CTA and pass constants, the
// shared-memory shapes of its stages, and the decoders that turn one staged Q6_K or Q4_K block into mma operands and
// accumulate it (block_q6k, block_q4k). Included by gemv_mma.cu alone (the kernel's translation unit); the x split
// (gemv_mma_x.cu) shares only kSlots and the x layout (gemv_mma_x.cuh).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "optimized/common.cuh"
#include "optimized/dequant_elem.cuh"
#include "optimized/gemv_mma_x.cuh"
#include "optimized/mma.cuh"

namespace mlaconf::cuda {
namespace {

// Warps per CTA: kWarps or kWarpsSmall (gemv_mma's split rule).
constexpr int kWarps = 8, kWarpsSmall = 4;
// Column groups per pass of a shared matrix: 2 (8 x), or 4 (16 x) where gemv_mma_cta says (from 33 x on, or x through
// shared memory). With 4 x per group, passes of 8 x measured faster at 16-64 x on the H200 than passes of 16 x in 8
// groups of 2 x, which decoded each weight less often (docs/perf/h200-2026-12-02.md).
constexpr int kMaxCg = 4, kMaxCgNarrow = 2;
constexpr int kGroupedCg = 1;  // column groups of a grouped experts' pass (MmaArgs::groups): its 4 slots

template <int TYPE> struct MmaShape;
// ts: block bytes; words: 16-byte words a row's block can span; slot: bytes per staged row (a multiple of
// 16 that is 16 mod 128, so the 8 rows x 4 lanes of a fragment load hit 32 different banks).
// stages: blocks in flight per warp. Q4_K: 2 (H200: faster than 3, or level, at every Q4_K case of kernel_bench;
// 4 and 6 were slower than 3 for the experts; docs/perf/gemv-blocks.md).
template <> struct MmaShape<kQ4_K> { static constexpr int ts = 144, words = 9, slot = 144, stages = 2; };
template <> struct MmaShape<kQ6_K> { static constexpr int ts = 210, words = 14, slot = 272, stages = 2; };

// x through shared memory (XS; gemv_mma_cta): where K is not split (ks = 1: the head) every warp of a CTA reads the
// same x, so the CTA stages each block's x fragments once (NCG x 4 KB, two stages) by cp.async and the warps read
// them by LDS: with every warp loading them from L1 / L2, the head's warps stalled on those loads in passes of 16 x
// (ncu: 4.6 per issue). Its staged rows take 240 bytes (15 x 16: the 8 rows' 16-byte
// segments still fall in 8 different bank groups) so that 8 warps and the x stages fit in 99 KB (sm_120).
template <int TYPE, bool XS>
constexpr int stage_slot() {
  return XS && TYPE == kQ6_K ? 240 : MmaShape<TYPE>::slot;
}
template <int TYPE, bool XS = false>
constexpr size_t smem_bytes(int warps) {
  return (size_t)warps * MmaShape<TYPE>::stages * 16 * stage_slot<TYPE, XS>();
}
constexpr size_t kXsBlockBytes = 16 * 32 * sizeof(uint2);  // one column group's B fragments of one block: 4 KB
// The x stages: 2 per K part, NCG column groups each: the head's one part of kMaxCg groups, or grouped experts' ks
// parts (ks <= W / 2: their row tiles come in pairs) of one group.
// x staged per warp (XW; gemv_mma_xwarp_pass): a Q4_K pass of one live x slot (the experts by id, one matrix at one x) has
// each warp copy its block's x with the weights by cp.async, the slot's two columns only: per stage 16 k-steps x 8
// uint2, then the block's 8 uint2 of the dmin term. After the warps' weight stages.
constexpr int kXwStage = 16 * 8 + 8;  // uint2
template <int TYPE, int NCG, int W, bool XS, bool XW = false>
constexpr size_t kernel_smem() {
  return smem_bytes<TYPE, XS>(W) + (XS ? 2 * kXsBlockBytes * (NCG > 1 ? NCG : W / 2) : 0) +
         (XW ? (size_t)W * MmaShape<TYPE>::stages * kXwStage * sizeof(uint2) : 0);
}

// Not volatile: a pure function of its operands, so the compiler may schedule the x loads ahead of it.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint2 b) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
}
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint2 b) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
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
constexpr uint32_t kBf128 = 0x43004300u;


// A row's block in shared memory as aligned 32-bit words and the funnel shift that undoes its misalignment
// (Q6_K's 210-byte blocks start at any even byte): one LOP3 per row and block, and every word after it at a
// fixed offset (LDS with an immediate; recomputing the alignment of every word took ~6 instructions each).
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

// fp16 1024's high byte in every byte, and 1024 as an fp16 pair; __constant__ for the reason of c_bf128_bytes.
__constant__ uint32_t c_f16_1024_bytes = 0x64646464u;
constexpr uint32_t kH1024 = 0x64006400u;
__device__ __forceinline__ __half2 as_h2(uint32_t u) { return *reinterpret_cast<const __half2*>(&u); }
__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }
// Bytes 0, 2 (sel 0x4240) or 1, 3 (0x4341) of q (each < 64) as two fp16 1024 + q, minus 1056: q - 32, exact.
__device__ __forceinline__ uint32_t q6_pair(uint32_t q, unsigned sel) {
  return h2_bits(__hsub2(as_h2(__byte_perm(q, c_f16_1024_bytes, sel)), as_h2(0x64206420u)));
}

// x's B fragment: from shared memory (XS: the CTA's stage) or through the read-only path.
template <bool XS>
__device__ __forceinline__ uint2 ld_x(const uint2* p) {
  if constexpr (XS) return *p;
  else return __ldg(p);
}

// One Q6_K block (ql[128] qh[64] scales[16] d) of rows g (s0) and g + 8 (s1). Sub-block u (16 values,
// u = 8 half + 2 j + lh) is positions 16 u of the block: lane t takes l = 16 lh + 4 t .. + 3 of its quarter j,
// from ql[64 half + 32 (j & 1) + l] (nibble j / 2) and qh[32 half + l] (bits 2 j), as the pairs (0, 2) and
// (1, 3) that split_x stored x in. xb: the lane's B fragment of the block's first k-step in column group 0
// (k-step u at xb[32 u], group c at + c * xg_stride; XS: in the CTA's stage); xf: the 2^-e of the lane's slot for
// this block in group 0 (group c at + c * xf_stride). Per sub-block and row: the fp32 sum of its hi and lo columns
// times the integer scale; per block times d 2^-e.
template <int NCG, bool XS = false>
__device__ __forceinline__ void block_q6k(const uint8_t* s0, const uint8_t* s1, int t, const uint2* xb,
                                          int64_t xg_stride, const float* xf, int64_t xf_stride, float (&acc)[NCG][2]) {
  float bacc[NCG][2];
#pragma unroll
  for (int c = 0; c < NCG; ++c) bacc[c][0] = bacc[c][1] = 0.f;
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
        const uint32_t a[4] = {q6_pair(q0, 0x4240u), q6_pair(q1, 0x4240u), q6_pair(q0, 0x4341u), q6_pair(q1, 0x4341u)};
        // The int8 scales (stored ^ 0x80, so unsigned): 128 + sc as a float, minus 128.
        const float sc0 = byte_as_float(scw0[u >> 2], u & 3, 128.f, c_f2p23_bits);
        const float sc1 = byte_as_float(scw1[u >> 2], u & 3, 128.f, c_f2p23_bits);
#pragma unroll
        for (int c = 0; c < NCG; ++c) {  // every group: padded with zero x (no branch around the mma)
          float C[4] = {0.f, 0.f, 0.f, 0.f};
          mma_f16(C, a, ld_x<XS>(xb + c * xg_stride + 32 * u));
          bacc[c][0] = fmaf(sc0, __fadd_rn(C[0], C[1]), bacc[c][0]);
          bacc[c][1] = fmaf(sc1, __fadd_rn(C[2], C[3]), bacc[c][1]);
        }
      }
    }
  const float d0 = ld_f16_hw(s0 + 208), d1 = ld_f16_hw(s1 + 208);
#pragma unroll
  for (int c = 0; c < NCG; ++c) {
    const float f = __ldg(xf + c * xf_stride);
    acc[c][0] = fmaf(__fmul_rn(d0, f), bacc[c][0], acc[c][0]);
    acc[c][1] = fmaf(__fmul_rn(d1, f), bacc[c][1], acc[c][1]);
  }
}

// (w & mask) | kH1024 in one LOP3 (written as C, the compiler emitted an AND and an OR: one instruction
// takes one immediate, so ptxas keeps 1024's bits in a register here).
__device__ __forceinline__ uint32_t nibbles_1024(uint32_t w, uint32_t mask) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(w), "r"(mask), "r"(kH1024));
  return r;
}

// The HFMA2 terms of one row's sub-block in block_q4k: the multiplier (sc, or sc / 16 for a high nibble) and
// the offset (-1024 sc, or -64 sc), each broadcast over a pair, all exact in fp16. sc: ggml's scale words
// (sub-blocks 0-3, 4-7).
struct ScaleTerms {
  __half2 mul, add;
};
// Two bytes of a scale word (PRMT selector sel: the low selector nibbles pick them, 0x4040 the 1024 bytes above)
// as an fp16 pair: (1024 + byte) built in each mantissa, minus 1024.
__device__ __forceinline__ __half2 byte_pair(uint32_t w, unsigned sel) {
  return __hsub2(as_h2(__byte_perm(w, c_f16_1024_bytes, sel)), as_h2(kH1024));
}
// Sub-block sb alone: (sc, sc).
__device__ __forceinline__ ScaleTerms sub_block_terms(const uint32_t (&sc)[2], int sb) {
  const __half2 p = byte_pair(sc[sb >> 2], 0x4040u | (unsigned)(sb & 3) | ((unsigned)(sb & 3) << 8));
  const bool hi = sb & 1;
  return {hi ? __hmul2(p, __float2half2_rn(0.0625f)) : p, __hmul2(p, __float2half2_rn(hi ? -64.f : -1024.f))};
}
// Both sub-blocks of chunk ch (2 ch: low nibbles, 2 ch + 1: high) of the two rows (scale words sc0, sc1),
// each row's from one pair (1024 + sc_lo, 1024 + sc_hi), each term then taking its half broadcast (.H0_H0 /
// .H1_H1 operands of the HFMA2): 4 instructions per row and chunk instead of 7.
__device__ __forceinline__ void chunk_terms(const uint32_t (&sc0)[2], const uint32_t (&sc1)[2], int ch, ScaleTerms (&r0)[2],
                                            ScaleTerms (&r1)[2]) {
  const unsigned sel = 0x4040u | (unsigned)(2 * (ch & 1)) | ((unsigned)(2 * (ch & 1) + 1) << 8);
  const __half2 p0 = byte_pair(sc0[ch >> 1], sel), p1 = byte_pair(sc1[ch >> 1], sel);
  const __half2 kmul = __halves2half2(__float2half_rn(1.f), __float2half_rn(0.0625f));
  const __half2 kadd = __halves2half2(__float2half_rn(-1024.f), __float2half_rn(-64.f));
  const __half2 mul0 = __hmul2(p0, kmul), mul1 = __hmul2(p1, kmul);
  const __half2 add0 = __hmul2(p0, kadd), add1 = __hmul2(p1, kadd);
  r0[0] = {__low2half2(mul0), __low2half2(add0)}, r0[1] = {__high2half2(mul0), __high2half2(add0)};
  r1[0] = {__low2half2(mul1), __low2half2(add1)}, r1[1] = {__high2half2(mul1), __high2half2(add1)};
}

// One Q4_K block (d dmin scales[12] qs[128]) of rows g (s0, 16-byte aligned) and g + 8 (s1), block b of the
// row. Chunk ch's 32 qs bytes hold sub-block 2 ch (low nibbles) and 2 ch + 1 (high); k-step (sub-block sb,
// half s) is qs bytes 32 ch + 16 s .. + 15, lane t taking bytes 4 t .. 4 t + 3 of it, whose x split_x_q4k
// stored as (0, 2, 1, 3). The A operand is sc q in fp16, exact (sc q <= 945): one LOP3 puts two nibbles in
// the mantissa of 1024 (a low nibble n as 1024 + n, a high one in place as 1024 + 16 n), one HFMA2 takes
// (1024 + n) sc - 1024 sc (or (1024 + 16 n) sc / 16 - 64 sc), so a whole block accumulates in fp32 in the
// tensor cores (two chains, low and high nibbles, added last). The dmin term is one more mma: A = m of
// sub-blocks 2 t, 2 t + 1 (bf16, exact) in k 0-7 and again in 8-15, B = xm (each sub-block's sum of x as three
// bf16 terms over k and the slot's two columns). xb: the lane's B fragment of the block's first k-step in column
// group 0 (group c at + c * xg_stride; XS: in the CTA's stage). Then per row y += d 2^-e (C_hi + C_lo) - dmin
// (M_hi + M_lo), the lane's two columns being its slot's two terms. XU: uint2 between k-steps of xb (32; 8 in a
// warp's x stage, XW); XMS: xm is the lane's dmin fragment of this block in that stage.
template <int NCG, bool XS = false, int XU = 32, bool XMS = false>
__device__ __forceinline__ void block_q4k(const uint8_t* s0, const uint8_t* s1, int64_t b, int t, const uint2* xb,
                                          int64_t xg_stride, const float* xf, int64_t xf_stride, const uint2* xm,
                                          int64_t xm_stride, float (&acc)[NCG][2]) {
  const uint4 h0 = *reinterpret_cast<const uint4*>(s0), h1 = *reinterpret_cast<const uint4*>(s1);
  // ggml's get_scale_min_k4, four sub-blocks per word: SC[0] for sub-blocks 0-3, [1] for 4-7.
  const uint32_t sc0[2] = {h0.y & 0x3F3F3F3Fu, (h0.w & 0x0F0F0F0Fu) | ((h0.y >> 2) & 0x30303030u)};
  const uint32_t sc1[2] = {h1.y & 0x3F3F3F3Fu, (h1.w & 0x0F0F0F0Fu) | ((h1.y >> 2) & 0x30303030u)};
  float C[2][NCG][4];
#pragma unroll
  for (int n = 0; n < 2; ++n)
#pragma unroll
    for (int c = 0; c < NCG; ++c) C[n][c][0] = C[n][c][1] = C[n][c][2] = C[n][c][3] = 0.f;
#pragma unroll
  for (int ch = 0; ch < 4; ++ch) {
    uint32_t w0[2], w1[2], v0[2], v1[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      w0[s] = *reinterpret_cast<const uint32_t*>(s0 + 16 + 32 * ch + 16 * s + 4 * t);
      w1[s] = *reinterpret_cast<const uint32_t*>(s1 + 16 + 32 * ch + 16 * s + 4 * t);
      v0[s] = w0[s] >> 8, v1[s] = w1[s] >> 8;
    }
    // The rows' HFMA2 terms. One x per pass: the chunk's two sub-blocks from one pair. With 4 column groups
    // the pairs measured 6-9 % slower (B = 8, H200), so there each sub-block builds its own: the same values
    // (docs/perf/gemv-blocks.md).
    ScaleTerms pair0[2], pair1[2];
    if constexpr (NCG == 1) chunk_terms(sc0, sc1, ch, pair0, pair1);
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int sb = 2 * ch + hi;
      const ScaleTerms r0 = NCG == 1 ? pair0[hi] : sub_block_terms(sc0, sb), r1 = NCG == 1 ? pair1[hi] : sub_block_terms(sc1, sb);
      const __half2 m0 = r0.mul, z0 = r0.add, m1 = r1.mul, z1 = r1.add;
      const uint32_t mask = hi ? 0x00F000F0u : 0x000F000Fu;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const uint32_t a[4] = {h2_bits(__hfma2(as_h2(nibbles_1024(w0[s], mask)), m0, z0)),
                               h2_bits(__hfma2(as_h2(nibbles_1024(w1[s], mask)), m1, z1)),
                               h2_bits(__hfma2(as_h2(nibbles_1024(v0[s], mask)), m0, z0)),
                               h2_bits(__hfma2(as_h2(nibbles_1024(v1[s], mask)), m1, z1))};
#pragma unroll
        for (int c = 0; c < NCG; ++c)  // every group: padded with zero x (no branch around the mma)
          mma_f16(C[hi][c], a, ld_x<XS>(xb + c * xg_stride + (2 * sb + s) * XU));
      }
    }
  }
  // The dmin term: m of sub-blocks 2 t, 2 t + 1 (word t / 2 of ggml's M, bytes 2 (t & 1), + 1) as bf16 128 + m
  // minus 128, in k 0-7 (against the sums' first or third terms) and 8-15 (the second).
  const uint32_t mw0 = t < 2 ? h0.z & 0x3F3F3F3Fu : ((h0.w >> 4) & 0x0F0F0F0Fu) | ((h0.z >> 2) & 0x30303030u);
  const uint32_t mw1 = t < 2 ? h1.z & 0x3F3F3F3Fu : ((h1.w >> 4) & 0x0F0F0F0Fu) | ((h1.z >> 2) & 0x30303030u);
  const unsigned msel = 0x4040u | (2u * (t & 1)) | ((2u * (t & 1) + 1) << 8);
  const uint32_t m0p = q_pair(mw0, msel, kBf128), m1p = q_pair(mw1, msel, kBf128);
  const uint32_t am[4] = {m0p, m1p, m0p, m1p};
  const float d0 = __half2float(__ushort_as_half((unsigned short)(h0.x & 0xffff)));
  const float dm0 = __half2float(__ushort_as_half((unsigned short)(h0.x >> 16)));
  const float d1 = __half2float(__ushort_as_half((unsigned short)(h1.x & 0xffff)));
  const float dm1 = __half2float(__ushort_as_half((unsigned short)(h1.x >> 16)));
#pragma unroll
  for (int c = 0; c < NCG; ++c) {
    float M[4] = {0.f, 0.f, 0.f, 0.f};
    mma_bf16(M, am, XMS ? xm[c * xm_stride] : __ldg(xm + c * xm_stride + b * 32));
    const float f = __ldg(xf + c * xf_stride + b * kSlots);
    const float c0 = __fadd_rn(__fadd_rn(C[0][c][0], C[1][c][0]), __fadd_rn(C[0][c][1], C[1][c][1]));
    const float c1 = __fadd_rn(__fadd_rn(C[0][c][2], C[1][c][2]), __fadd_rn(C[0][c][3], C[1][c][3]));
    acc[c][0] = fmaf(-dm0, __fadd_rn(M[0], M[1]), fmaf(__fmul_rn(d0, f), c0, acc[c][0]));
    acc[c][1] = fmaf(-dm1, __fadd_rn(M[2], M[3]), fmaf(__fmul_rn(d1, f), c1, acc[c][1]));
  }
}

}  // namespace
}  // namespace mlaconf::cuda
