// mlaconf reference: dequantization of ggml blocks to float, scalar and obvious, bit-exact with ggml.
//
// One function per type lives in the files beside this header (float_types, legacy_quants, k_quants,
// iq_quants, mxfp4); this header is the only entry point the rest of the project uses.
#pragma once
#include <cstdint>
#include <vector>

#include "core/ggml_types.h"
#include "core/gguf.h"

namespace mlaconf::ref {

// IEEE half / bfloat16 to float, exactly (subnormals, inf, NaN kept).
float fp16_to_float(uint16_t h);
float bf16_to_float(uint16_t h);

// True for every type mlaconf dequantizes (core's weight_types()).
bool can_dequantize(GgmlType t);

// Dequantizes n values (a multiple of the type's block size) from raw blocks at `src` into `dst`.
// Throws InputError for a type it cannot dequantize or a bad n.
void dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n);

// Rows [row0, row0 + nrows) of a tensor (each ne[0] values) into dst (nrows * ne[0] floats).
void dequantize_rows(const TensorInfo& t, int64_t row0, int64_t nrows, float* dst);
// The whole tensor, ne[0] fastest.
std::vector<float> dequantize_tensor(const TensorInfo& t);

}  // namespace mlaconf::ref
