// mlaconf optimized: one ggml value from its raw block, for every weight type, on host and device.
//
// dq_elem(type, block, i) returns value i (0 <= i < block_size) of one block. The formulas follow
// ggml's block layouts (../shared/docs/gguf-formats.md) and ggml's order of float operations, with
// every product and sum rounded on its own (MUL_RN/ADD_RN) so the result is bit-exact with the
// scalar CPU dequantizer. The same function serves the dequant kernels and the fused GEMVs.
#pragma once
#include <cstdint>

#include "optimized/common.cuh"

namespace mlaconf::cuda {

// Type ids (ggml's enum ggml_type values, as in core/ggml_types.h).
enum : int {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ2_K = 10, kQ3_K = 11,
  kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19,
  kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22, kIQ4_XS = 23, kIQ1_M = 29, kBF16 = 30, kMXFP4 = 39,
};

// The lattice tables of the IQ types (host or device copies; see optimized/iq_grids.inc).
struct IqGrids {
  const uint8_t* iq2xxs;  // [256][8]
  const uint8_t* iq2xs;   // [512][8]
  const uint8_t* iq2s;    // [1024][8]
  const uint8_t* iq3xxs;  // [256][4]
  const uint8_t* iq3s;    // [512][4]
  const int8_t* iq1s;     // [2048][8]
};

__host__ __device__ __forceinline__ int popcount7(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __popc(x);
#else
  return __builtin_popcount(x);
#endif
}
// The IQ2/IQ3 sign byte: 7 stored sign bits, the 8th makes the count of negatives even.
__host__ __device__ __forceinline__ uint32_t iq_sign_byte(uint32_t s7) { return s7 | ((uint32_t)(popcount7(s7) & 1) << 7); }
__host__ __device__ __forceinline__ float apply_sign(float v, bool neg) { return neg ? -v : v; }

// Q4_K / Q5_K 6-bit scale and min of sub-block j.
__host__ __device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

__host__ __device__ __forceinline__ float e8m0_half(uint8_t e) {
  // 2^(e-128): subnormal for e < 2.
  return bits_to_float(e < 2 ? (0x00200000u << e) : ((uint32_t)(e - 1) << 23));
}

__host__ __device__ __forceinline__ float dq_elem(int type, const uint8_t* b, int i, const IqGrids& g) {
  switch (type) {
    case kF32: return bits_to_float(ld_u32(b));
    case kF16: return ld_f16(b);
    case kBF16: return bits_to_float((uint32_t)ld_u16(b) << 16);
    case kQ4_0: {
      const float d = ld_f16(b);
      const int j = i & 15;
      const int q = i < 16 ? (b[2 + j] & 15) : (b[2 + j] >> 4);
      return MUL_RN((float)(q - 8), d);
    }
    case kQ4_1: {
      const float d = ld_f16(b), m = ld_f16(b + 2);
      const int j = i & 15;
      const int q = i < 16 ? (b[4 + j] & 15) : (b[4 + j] >> 4);
      return ADD_RN(MUL_RN((float)q, d), m);
    }
    case kQ5_0: {
      const float d = ld_f16(b);
      const uint32_t qh = ld_u32(b + 2);
      const int j = i & 15;
      const int q = i < 16 ? ((b[6 + j] & 15) | (((qh >> j) << 4) & 16)) : ((b[6 + j] >> 4) | ((qh >> (j + 12)) & 16));
      return MUL_RN((float)(q - 16), d);
    }
    case kQ5_1: {
      const float d = ld_f16(b), m = ld_f16(b + 2);
      const uint32_t qh = ld_u32(b + 4);
      const int j = i & 15;
      const int q = i < 16 ? ((b[8 + j] & 15) | (((qh >> j) << 4) & 16)) : ((b[8 + j] >> 4) | ((qh >> (j + 12)) & 16));
      return ADD_RN(MUL_RN((float)q, d), m);
    }
    case kQ8_0: return MUL_RN((float)(int8_t)b[2 + i], ld_f16(b));
    case kQ2_K: {  // scales[16] qs[64] d dmin
      const int n = i >> 7, r = i & 127, j = r >> 5, l = r & 31;
      const uint8_t sc = b[8 * n + 2 * j + (l >> 4)];
      const float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
      const float dl = MUL_RN(d, (float)(sc & 15)), ml = MUL_RN(dmin, (float)(sc >> 4));
      const int q = (b[16 + 32 * n + l] >> (2 * j)) & 3;
      return SUB_RN(MUL_RN(dl, (float)q), ml);
    }
    case kQ3_K: {  // hmask[32] qs[64] scales[12] d
      const int n = i >> 7, r = i & 127, j = r >> 5, l = r & 31;
      const int is = 8 * n + 2 * j + (l >> 4);
      const uint8_t* s = b + 96;
      const int low = (is < 8 ? s[is] : (s[is - 8] >> 4)) & 15;
      const int hi = (s[8 + (is & 3)] >> (2 * (is >> 2))) & 3;
      const int scale = (low | (hi << 4)) - 32;
      const float dl = MUL_RN(ld_f16(b + 108), (float)scale);
      const int q = ((b[32 + 32 * n + l] >> (2 * j)) & 3) - ((b[l] & (1 << (4 * n + j))) ? 0 : 4);
      return MUL_RN(dl, (float)q);
    }
    case kQ4_K: {  // d dmin scales[12] qs[128]
      const int c = i >> 6, hi = (i >> 5) & 1, l = i & 31;
      int sc, m;
      scale_min_k4(2 * c + hi, b + 4, &sc, &m);
      const float d1 = MUL_RN(ld_f16(b), (float)sc), m1 = MUL_RN(ld_f16(b + 2), (float)m);
      const uint8_t qb = b[16 + 32 * c + l];
      const int q = hi ? (qb >> 4) : (qb & 15);
      return SUB_RN(MUL_RN(d1, (float)q), m1);
    }
    case kQ5_K: {  // d dmin scales[12] qh[32] qs[128]
      const int c = i >> 6, hi = (i >> 5) & 1, l = i & 31;
      int sc, m;
      scale_min_k4(2 * c + hi, b + 4, &sc, &m);
      const float d1 = MUL_RN(ld_f16(b), (float)sc), m1 = MUL_RN(ld_f16(b + 2), (float)m);
      const uint8_t qb = b[48 + 32 * c + l];
      const int q = (hi ? (qb >> 4) : (qb & 15)) + ((b[16 + l] & (1 << (2 * c + hi))) ? 16 : 0);
      return SUB_RN(MUL_RN(d1, (float)q), m1);
    }
    case kQ6_K: {  // ql[128] qh[64] scales[16] d
      const int n = i >> 7, r = i & 127, gq = r >> 5, l = r & 31;
      const uint8_t* ql = b + 64 * n;
      const uint8_t qh = b[128 + 32 * n + l];
      const int8_t* sc = (const int8_t*)(b + 192 + 8 * n);
      const int is = l >> 4;
      const uint8_t qlb = ql[l + ((gq & 1) ? 32 : 0)];
      const int lo = (gq < 2) ? (qlb & 15) : (qlb >> 4);
      const int q = (lo | (((qh >> (2 * gq)) & 3) << 4)) - 32;
      return MUL_RN(MUL_RN(ld_f16(b + 208), (float)sc[is + 2 * gq]), (float)q);
    }
    case kIQ4_NL:
    case kIQ4_XS:
    case kMXFP4: {
      // IQ4_NL: d qs[16]; IQ4_XS: d scales_h scales_l[4] qs[128]; MXFP4: e qs[16].
      const int j = i & 15;
      if (type == kMXFP4) {
        constexpr int8_t kf[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
        const int q = i < 16 ? (b[1 + j] & 15) : (b[1 + j] >> 4);
        return MUL_RN((float)kf[q], e8m0_half(b[0]));
      }
      constexpr int8_t kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
      if (type == kIQ4_NL) {
        const int q = i < 16 ? (b[2 + j] & 15) : (b[2 + j] >> 4);
        return MUL_RN(ld_f16(b), (float)kv[q]);
      }
      const int ib = i >> 5, r = i & 31, jj = r & 15;
      const int ls = ((b[4 + (ib >> 1)] >> (4 * (ib & 1))) & 15) | (((ld_u16(b + 2) >> (2 * ib)) & 3) << 4);
      const float dl = MUL_RN(ld_f16(b), (float)(ls - 32));
      const uint8_t qb = b[8 + 16 * ib + jj];
      return MUL_RN(dl, (float)kv[r < 16 ? (qb & 15) : (qb >> 4)]);
    }
    case kIQ2_XXS: {  // d qs[32 u16]
      const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
      const uint32_t a0 = ld_u32(b + 2 + 8 * ib), a1 = ld_u32(b + 6 + 8 * ib);
      const float db = MUL_RN(MUL_RN(ld_f16(b), 0.5f + (float)(a1 >> 28)), 0.25f);
      const uint32_t idx = (a0 >> (8 * l)) & 255;
      const uint32_t s = iq_sign_byte((a1 >> (7 * l)) & 127);
      return apply_sign(MUL_RN(db, (float)g.iq2xxs[8 * idx + j]), (s >> j) & 1);
    }
    case kIQ2_XS: {  // d qs[32 u16] scales[8]
      const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
      const uint32_t q = ld_u16(b + 2 + 2 * (4 * ib + l));
      const uint8_t scb = b[66 + ib];
      const float db = MUL_RN(MUL_RN(ld_f16(b), 0.5f + (float)((l < 2) ? (scb & 15) : (scb >> 4))), 0.25f);
      const uint32_t s = iq_sign_byte(q >> 9);
      return apply_sign(MUL_RN(db, (float)g.iq2xs[8 * (q & 511) + j]), (s >> j) & 1);
    }
    case kIQ2_S: {  // d qs[64] (32 grid bytes, 32 sign bytes) qh[8] scales[8]
      const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
      const uint8_t scb = b[74 + ib];
      const float db = MUL_RN(MUL_RN(ld_f16(b), 0.5f + (float)((l < 2) ? (scb & 15) : (scb >> 4))), 0.25f);
      const uint32_t idx = b[2 + 4 * ib + l] | (((uint32_t)b[66 + ib] << (8 - 2 * l)) & 0x300);
      const uint8_t s = b[2 + 32 + 4 * ib + l];
      return apply_sign(MUL_RN(db, (float)g.iq2s[8 * idx + j]), (s >> j) & 1);
    }
    case kIQ3_XXS: {  // d qs[64] scales_and_signs[32]
      const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
      const uint32_t a = ld_u32(b + 66 + 4 * ib);
      const float db = MUL_RN(MUL_RN(ld_f16(b), 0.5f + (float)(a >> 28)), 0.5f);
      const uint32_t s = iq_sign_byte((a >> (7 * l)) & 127);
      const uint32_t idx = b[2 + 8 * ib + 2 * l + (j >> 2)];
      return apply_sign(MUL_RN(db, (float)g.iq3xxs[4 * idx + (j & 3)]), (s >> j) & 1);
    }
    case kIQ3_S: {  // d qs[64] qh[8] signs[32] scales[4]
      const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
      const int nib = (b[106 + (ib >> 1)] >> (4 * (ib & 1))) & 15;
      const float db = MUL_RN(ld_f16(b), (float)(1 + 2 * nib));
      const uint32_t qhb = b[66 + ib];
      const uint32_t idx = j < 4 ? (b[2 + 8 * ib + 2 * l] | ((qhb << (8 - 2 * l)) & 256))
                                 : (b[2 + 8 * ib + 2 * l + 1] | ((qhb << (7 - 2 * l)) & 256));
      const uint8_t s = b[74 + 4 * ib + l];
      return apply_sign(MUL_RN(db, (float)g.iq3s[4 * idx + (j & 3)]), (s >> j) & 1);
    }
    case kIQ1_S: {  // d qs[32] qh[8 u16]
      const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
      const uint32_t qh = ld_u16(b + 34 + 2 * ib);
      const float dl = MUL_RN(ld_f16(b), (float)(2 * ((qh >> 12) & 7) + 1));
      const float delta = (qh & 0x8000) ? -0.125f : 0.125f;
      const uint32_t idx = b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
      return MUL_RN(dl, ADD_RN((float)g.iq1s[8 * idx + j], delta));
    }
    case kIQ1_M: {  // qs[32] qh[16] scales[8] (the f16 scale is spread over the top nibbles)
      const int ib = i >> 5, l = (i >> 3) & 3, j = i & 7;
      const uint16_t s0 = ld_u16(b + 48), s1 = ld_u16(b + 50), s2 = ld_u16(b + 52), s3 = ld_u16(b + 54);
      const uint16_t dbits = (uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000));
      const float d = half_bits_to_float(dbits);
      const uint16_t sc = ld_u16(b + 48 + 2 * (ib >> 1));
      const int s = (sc >> (6 * (ib & 1) + (l < 2 ? 0 : 3))) & 7;
      const float dl = MUL_RN(d, (float)(2 * s + 1));
      const uint32_t qhb = b[32 + 2 * ib + (l >> 1)];
      const uint32_t idx = b[4 * ib + l] | ((qhb << ((l & 1) ? 4 : 8)) & 0x700);
      const float delta = (qhb & ((l & 1) ? 0x80 : 0x08)) ? -0.125f : 0.125f;
      return MUL_RN(dl, ADD_RN((float)g.iq1s[8 * idx + j], delta));
    }
    default: return 0.0f;  // unreachable: launchers reject other types
  }
}

}  // namespace mlaconf::cuda
