// mlaconf reference: the IQ types (i-quants), 256-value super-blocks.
//
// Layouts (ggml-common.h; d is an IEEE half):
//   IQ4_XS  136 B: d, u16 scales_h, scales_l[4], qs[128]   8 sub-blocks of 32, 6-bit scales offset 32
//   IQ2_XXS  66 B: d, u16 qs[32]        per 32 values: 4 grid bytes, then a u32 of 4x7 sign bits + 4-bit scale
//   IQ2_XS   74 B: d, u16 qs[32], scales[8]            u16 = 9-bit grid index | 7 sign bits << 9
//   IQ2_S    82 B: d, qs[32] grid low bytes, signs[32], qh[8], scales[8]
//   IQ3_XXS  98 B: d, qs[64] grid bytes, then 8 u32 of 4x7 sign bits + 4-bit scale
//   IQ3_S   110 B: d, qs[64], qh[8], signs[32], scales[4]
//   IQ1_S    50 B: d, qs[32], u16 qh[8] (3 high index bits x4, 3-bit scale, delta sign)
//   IQ1_M    56 B: qs[32], qh[16], scales[8] (the f16 d is spread over the top nibbles of the scales)
// Float order follows ggml-quants.c (e.g. IQ2: d * (0.5f + s) * 0.25f, then db * grid * sign).
#include "reference/dequant/dequant.h"
#include "reference/dequant/iq_tables.h"
#include "reference/dequant/row_dequantizers.h"

namespace mlaconf::ref::detail {

namespace {
constexpr int kQK_K = 256;
}

void dequantize_row_iq4_xs(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, src += 136) {
    const float d = fp16_to_float(load_u16(src));
    const uint16_t scales_h = load_u16(src + 2);
    const uint8_t* scales_l = src + 4;
    const uint8_t* qs = src + 8;
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((scales_h >> 2 * ib) & 3) << 4);
      const float dl = d * (ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j + 0] = dl * kvalues_iq4nl[qs[j] & 0xF];
        y[j + 16] = dl * kvalues_iq4nl[qs[j] >> 4];
      }
      y += 32;
      qs += 16;
    }
  }
}

namespace {

// Byte j of a packed grid entry.
inline uint8_t grid_byte(uint64_t entry, int j) { return static_cast<uint8_t>(entry >> (8 * j)); }
inline int8_t grid_sbyte(uint64_t entry, int j) { return static_cast<int8_t>(entry >> (8 * j)); }
inline float sign_of(uint8_t signs, int j) { return (signs & kmask_iq2xs[j]) ? -1.f : 1.f; }

}  // namespace

void dequantize_row_iq2_xxs(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, src += 66) {
    const float d = fp16_to_float(load_u16(src));
    const uint8_t* qs = src + 2;
    for (int ib32 = 0; ib32 < kQK_K / 32; ++ib32) {
      // 8 bytes per 32 values: 4 grid indices (aux8[0..3]), then a u32 holding 4 x 7 sign bits and,
      // in its top 4 bits, the sub-block scale.
      const uint8_t* aux8 = qs + 8 * ib32;
      const uint32_t aux1 = load_u32(qs + 8 * ib32 + 4);
      const float db = d * (0.5f + (aux1 >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const uint64_t grid = iq2xxs_grid[aux8[l]];
        const uint8_t signs = ksigns_iq2xs[(aux1 >> 7 * l) & 127];
        for (int j = 0; j < 8; ++j) y[j] = db * grid_byte(grid, j) * sign_of(signs, j);
        y += 8;
      }
    }
  }
}

void dequantize_row_iq2_xs(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, src += 74) {
    const float d = fp16_to_float(load_u16(src));
    const uint8_t* qs = src + 2;       // 32 x u16: 9-bit grid index | 7 sign bits << 9
    const uint8_t* scales = src + 66;  // 8 bytes: two 4-bit scales per 32 values
    float db[2];
    for (int ib32 = 0; ib32 < kQK_K / 32; ++ib32) {
      db[0] = d * (0.5f + (scales[ib32] & 0xF)) * 0.25f;
      db[1] = d * (0.5f + (scales[ib32] >> 4)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const uint16_t q = load_u16(qs + 2 * (4 * ib32 + l));
        const uint64_t grid = iq2xs_grid[q & 511];
        const uint8_t signs = ksigns_iq2xs[q >> 9];
        for (int j = 0; j < 8; ++j) y[j] = db[l / 2] * grid_byte(grid, j) * sign_of(signs, j);
        y += 8;
      }
    }
  }
}

void dequantize_row_iq2_s(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, src += 82) {
    const float d = fp16_to_float(load_u16(src));
    const uint8_t* qs = src + 2;          // 32 low bytes of the 10-bit grid indices
    const uint8_t* signs = src + 2 + 32;  // 32 explicit sign bytes
    const uint8_t* qh = src + 66;         // 8 bytes: 2 high index bits per group of 8
    const uint8_t* scales = src + 74;     // 8 bytes: two 4-bit scales per 32 values
    float db[2];
    for (int ib32 = 0; ib32 < kQK_K / 32; ++ib32) {
      db[0] = d * (0.5f + (scales[ib32] & 0xF)) * 0.25f;
      db[1] = d * (0.5f + (scales[ib32] >> 4)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        const float dl = db[l / 2];
        const uint64_t grid = iq2s_grid[qs[l] | ((qh[ib32] << (8 - 2 * l)) & 0x300)];
        for (int j = 0; j < 8; ++j) y[j] = dl * grid_byte(grid, j) * sign_of(signs[l], j);
        y += 8;
      }
      qs += 4;
      signs += 4;
    }
  }
}

void dequantize_row_iq3_xxs(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, src += 98) {
    const float d = fp16_to_float(load_u16(src));
    const uint8_t* qs = src + 2;                     // 64 grid indices (4 values each)
    const uint8_t* scales_and_signs = src + 2 + 64;  // 8 x u32: 4 x 7 sign bits + 4-bit scale
    for (int ib32 = 0; ib32 < kQK_K / 32; ++ib32) {
      const uint32_t aux32 = load_u32(scales_and_signs + 4 * ib32);
      const float db = d * (0.5f + (aux32 >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l) {
        const uint8_t signs = ksigns_iq2xs[(aux32 >> 7 * l) & 127];
        const uint32_t grid1 = iq3xxs_grid[qs[2 * l + 0]];
        const uint32_t grid2 = iq3xxs_grid[qs[2 * l + 1]];
        for (int j = 0; j < 4; ++j) {
          y[j + 0] = db * grid_byte(grid1, j) * sign_of(signs, j + 0);
          y[j + 4] = db * grid_byte(grid2, j) * sign_of(signs, j + 4);
        }
        y += 8;
      }
      qs += 8;
    }
  }
}

void dequantize_row_iq3_s(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, src += 110) {
    const float d = fp16_to_float(load_u16(src));
    const uint8_t* qs = src + 2;       // 64 low bytes of the 9-bit grid indices
    const uint8_t* qh = src + 66;      // 8 bytes: the 9th index bit, one byte per 32 values
    const uint8_t* signs = src + 74;   // 32 sign bytes
    const uint8_t* scales = src + 106; // 4 bytes: two 4-bit scales per 64 values
    for (int ib32 = 0; ib32 < kQK_K / 32; ib32 += 2) {
      const float db1 = d * (1 + 2 * (scales[ib32 / 2] & 0xF));
      const float db2 = d * (1 + 2 * (scales[ib32 / 2] >> 4));
      for (int half = 0; half < 2; ++half) {
        const float db = half == 0 ? db1 : db2;
        for (int l = 0; l < 4; ++l) {
          const uint32_t grid1 = iq3s_grid[qs[2 * l + 0] | ((qh[half] << (8 - 2 * l)) & 256)];
          const uint32_t grid2 = iq3s_grid[qs[2 * l + 1] | ((qh[half] << (7 - 2 * l)) & 256)];
          for (int j = 0; j < 4; ++j) {
            y[j + 0] = db * grid_byte(grid1, j) * sign_of(signs[l], j + 0);
            y[j + 4] = db * grid_byte(grid2, j) * sign_of(signs[l], j + 4);
          }
          y += 8;
        }
        qs += 8;
        signs += 4;
      }
      qh += 2;
    }
  }
}

void dequantize_row_iq1_s(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, src += 50) {
    const float d = fp16_to_float(load_u16(src));
    const uint8_t* qs = src + 2;   // 32 low bytes of the 11-bit grid indices
    const uint8_t* qhb = src + 34; // 8 x u16: 4 x 3 high index bits, 3-bit scale, delta sign
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const uint16_t qh = load_u16(qhb + 2 * ib);
      const float dl = d * (2 * ((qh >> 12) & 7) + 1);
      const float delta = (qh & 0x8000) ? -kIQ1S_DELTA : kIQ1S_DELTA;
      for (int l = 0; l < 4; ++l) {
        const uint64_t grid = iq1s_grid[qs[l] | (((qh >> 3 * l) & 7) << 8)];
        for (int j = 0; j < 8; ++j) y[j] = dl * (grid_sbyte(grid, j) + delta);
        y += 8;
      }
      qs += 4;
    }
  }
}

void dequantize_row_iq1_m(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, src += 56) {
    const uint8_t* qs = src;       // 32 low bytes of the 11-bit grid indices
    const uint8_t* qh = src + 32;  // 16 bytes: per group of 8, 3 high index bits + delta sign bit
    uint16_t sc[4];                // 4 x u16: 3-bit sub-scales, and d's 4 nibbles in their tops
    for (int k = 0; k < 4; ++k) sc[k] = load_u16(src + 48 + 2 * k);
    const uint16_t d_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                                  ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
    const float d = fp16_to_float(d_bits);
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const float dl1 = d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 0)) & 0x7) + 1);
      const float dl2 = d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 0x7) + 1);
      uint16_t idx[4];
      idx[0] = static_cast<uint16_t>(qs[0] | ((qh[0] << 8) & 0x700));
      idx[1] = static_cast<uint16_t>(qs[1] | ((qh[0] << 4) & 0x700));
      idx[2] = static_cast<uint16_t>(qs[2] | ((qh[1] << 8) & 0x700));
      idx[3] = static_cast<uint16_t>(qs[3] | ((qh[1] << 4) & 0x700));
      float delta[4];
      delta[0] = (qh[0] & 0x08) ? -kIQ1S_DELTA : kIQ1S_DELTA;
      delta[1] = (qh[0] & 0x80) ? -kIQ1S_DELTA : kIQ1S_DELTA;
      delta[2] = (qh[1] & 0x08) ? -kIQ1S_DELTA : kIQ1S_DELTA;
      delta[3] = (qh[1] & 0x80) ? -kIQ1S_DELTA : kIQ1S_DELTA;
      for (int l = 0; l < 4; ++l) {
        const float dl = l < 2 ? dl1 : dl2;
        const uint64_t grid = iq1s_grid[idx[l]];
        for (int j = 0; j < 8; ++j) y[j] = dl * (grid_sbyte(grid, j) + delta[l]);
        y += 8;
      }
      qs += 4;
      qh += 2;
    }
  }
}

}  // namespace mlaconf::ref::detail
