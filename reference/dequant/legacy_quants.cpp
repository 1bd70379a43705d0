// mlaconf reference: the 32-value block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL.
//
// Layouts (ggml-common.h), d and m are IEEE halves:
//   Q4_0   18 B: d, qs[16]            value j low nibble of qs[j], value j+16 high nibble
//   Q4_1   20 B: d, m, qs[16]
//   Q5_0   22 B: d, qh[4], qs[16]     qh is a little-endian u32 holding the 5th bit of each value
//   Q5_1   24 B: d, m, qh[4], qs[16]
//   Q8_0   34 B: d, int8 qs[32]
//   IQ4_NL 18 B: d, qs[16]            nibbles index the non-linear table kvalues_iq4nl
// Float order follows ggml-quants.c: an int (or int8) times the float scale, then + m.
#include "reference/dequant/iq_tables.h"
#include "reference/dequant/row_dequantizers.h"
#include "reference/dequant/dequant.h"

namespace mlaconf::ref::detail {

namespace {
constexpr int kQK = 32;
}

void dequantize_row_q4_0(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, src += 18, y += kQK) {
    const float d = fp16_to_float(load_u16(src));
    const uint8_t* qs = src + 2;
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = (qs[j] & 0x0F) - 8;
      const int x1 = (qs[j] >> 4) - 8;
      y[j] = x0 * d;
      y[j + kQK / 2] = x1 * d;
    }
  }
}

void dequantize_row_q4_1(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, src += 20, y += kQK) {
    const float d = fp16_to_float(load_u16(src));
    const float m = fp16_to_float(load_u16(src + 2));
    const uint8_t* qs = src + 4;
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = qs[j] & 0x0F;
      const int x1 = qs[j] >> 4;
      y[j] = x0 * d + m;
      y[j + kQK / 2] = x1 * d + m;
    }
  }
}

void dequantize_row_q5_0(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, src += 22, y += kQK) {
    const float d = fp16_to_float(load_u16(src));
    const uint32_t qh = load_u32(src + 2);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t xh0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);  // bit j     -> value j
      const uint8_t xh1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);  // bit j+16  -> value j+16
      const int32_t x0 = ((qs[j] & 0x0F) | xh0) - 16;
      const int32_t x1 = ((qs[j] >> 4) | xh1) - 16;
      y[j] = x0 * d;
      y[j + kQK / 2] = x1 * d;
    }
  }
}

void dequantize_row_q5_1(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, src += 24, y += kQK) {
    const float d = fp16_to_float(load_u16(src));
    const float m = fp16_to_float(load_u16(src + 2));
    const uint32_t qh = load_u32(src + 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t xh0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
      const uint8_t xh1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
      const int x0 = (qs[j] & 0x0F) | xh0;
      const int x1 = (qs[j] >> 4) | xh1;
      y[j] = x0 * d + m;
      y[j + kQK / 2] = x1 * d + m;
    }
  }
}

void dequantize_row_q8_0(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, src += 34, y += kQK) {
    const float d = fp16_to_float(load_u16(src));
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < kQK; ++j) y[j] = qs[j] * d;
  }
}

void dequantize_row_iq4_nl(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, src += 18, y += kQK) {
    const float d = fp16_to_float(load_u16(src));
    const uint8_t* qs = src + 2;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * kvalues_iq4nl[qs[j] & 0xF];
      y[j + kQK / 2] = d * kvalues_iq4nl[qs[j] >> 4];
    }
  }
}

}  // namespace mlaconf::ref::detail
