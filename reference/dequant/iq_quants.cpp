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

}  // namespace mlaconf::ref::detail
