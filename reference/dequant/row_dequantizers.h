// mlaconf reference: the per-type row dequantizers behind dequant.h (internal to reference/dequant).
//
// Each function turns n values' worth of raw ggml blocks (n a multiple of the block size, checked by
// the caller in dequant.cpp) into n floats. They mirror ggml's dequantize_row_* (ggml-quants.c) one for
// one, including the order of float operations, so that the results are bit-identical to ggml's.
// Blocks are read byte-wise with explicit little-endian loads: no struct packing assumptions.
#pragma once
#include <cstdint>
#include <cstring>

namespace mlaconf::ref::detail {

inline uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

// float_types.cpp
void dequantize_row_f32(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_f16(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_bf16(const uint8_t* src, float* dst, int64_t n);

// legacy_quants.cpp (32-value blocks)
void dequantize_row_q4_0(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_q4_1(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_q5_0(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_q5_1(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_q8_0(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_iq4_nl(const uint8_t* src, float* dst, int64_t n);

// k_quants.cpp (256-value super-blocks)
void dequantize_row_q2_k(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_q3_k(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_q4_k(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_q5_k(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_q6_k(const uint8_t* src, float* dst, int64_t n);

// iq_quants.cpp (256-value super-blocks; grids in iq_tables.h)
void dequantize_row_iq4_xs(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_iq2_xxs(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_iq2_xs(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_iq2_s(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_iq3_xxs(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_iq3_s(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_iq1_s(const uint8_t* src, float* dst, int64_t n);
void dequantize_row_iq1_m(const uint8_t* src, float* dst, int64_t n);

// mxfp4.cpp
void dequantize_row_mxfp4(const uint8_t* src, float* dst, int64_t n);
// E8M0 exponent byte to the float 2^(e-128) (ggml's GGML_E8M0_TO_FP32_HALF: the half is folded in
// because kvalues_mxfp4 holds doubled e2m1 values).
float e8m0_to_float_half(uint8_t e);

}  // namespace mlaconf::ref::detail
