// mlaconf reference: MXFP4 (OCP microscaling FP4), 17 bytes per 32 values.
//
// Layout: e (u8, E8M0 shared exponent), qs[16] (value j low nibble of qs[j], value j+16 high nibble);
// each nibble is an E2M1 code, looked up doubled in kvalues_mxfp4, so the scale is 2^(e-128) = half of
// the E8M0 value 2^(e-127).
#include <cstring>

#include "reference/dequant/iq_tables.h"
#include "reference/dequant/row_dequantizers.h"

namespace mlaconf::ref::detail {

// ggml_e8m0_to_fp32_half: e = 0 and 1 give the float subnormals 2^-128 and 2^-127; otherwise the float
// with biased exponent e-1. e = 255 is 2^127 (ggml gives E8M0's NaN code no special meaning here).
float e8m0_to_float_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void dequantize_row_mxfp4(const uint8_t* src, float* y, int64_t n) {
  constexpr int kQK = 32;
  for (int64_t i = 0; i < n / kQK; ++i, src += 17, y += kQK) {
    const float d = e8m0_to_float_half(src[0]);
    const uint8_t* qs = src + 1;
    for (int j = 0; j < kQK / 2; ++j) {
      const int8_t x0 = kvalues_mxfp4[qs[j] & 0x0F];
      const int8_t x1 = kvalues_mxfp4[qs[j] >> 4];
      y[j] = x0 * d;
      y[j + kQK / 2] = x1 * d;
    }
  }
}

}  // namespace mlaconf::ref::detail
