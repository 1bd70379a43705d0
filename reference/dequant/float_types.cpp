// mlaconf reference: F32, F16 and BF16 "dequantization" (exact conversions to float).
#include <cstring>

#include "reference/dequant/dequant.h"
#include "reference/dequant/row_dequantizers.h"

namespace mlaconf::ref {

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Every half is exactly representable
// as a float. NaNs keep sign and payload and come out quiet (bit 22 set), as ggml's conversion does
// (its software path ends in a float multiply, and F16C's vcvtph2ps quiets too).
float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;  // +-0
    } else {
      // Subnormal half: mant * 2^-24. Renormalise: shift the mantissa up until its leading 1 reaches
      // bit 10, lowering the exponent by one per shift.
      int e = -14;
      uint32_t m = mant;
      while ((m & 0x400u) == 0) {
        m <<= 1;
        --e;
      }
      m &= 0x3FFu;
      bits = sign | (static_cast<uint32_t>(e + 127) << 23) | (m << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
    if (mant != 0) bits |= 0x00400000u;  // quiet NaN
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);  // rebias 15 -> 127
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// bfloat16 is the upper half of a float: exact, NaN payloads kept as they are (ggml does the same).
float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

namespace detail {

void dequantize_row_f32(const uint8_t* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_row_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(load_u16(src + 2 * i));
}

void dequantize_row_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(load_u16(src + 2 * i));
}

}  // namespace detail
}  // namespace mlaconf::ref
