// mlaconf synth: filling raw ggml blocks with seeded random data of a chosen magnitude.
//
// Float types (F32, F16, BF16) get real samples of the requested distribution. Quantized types get
// random quant bits (every bit pattern is a valid block, which exercises decode paths better than a
// quantizer would) and scale fields chosen so the dequantized values have the requested RMS:
// d = rms / unit_rms(type), where unit_rms is the RMS of the block's values at d = 1 under the scale
// pattern written here. Types with a min (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) get min = half the quant range,
// so their values are centred on zero. For the grid-based IQ types unit_rms uses grid RMS values
// measured with gguf-py (see block_fill.cpp). Measured: dequantized RMS within 1% of the target for
// every weight type but MXFP4 (power-of-two scale: within 4%).
#pragma once
#include <cstdint>

#include "core/ggml_types.h"
#include "synth/rng.h"

namespace mlaconf::synth {

// What the values of a tensor should look like.
struct ValueDist {
  enum Kind { Normal, Uniform } kind = Normal;
  double center = 0;  // mean (Normal) or centre (Uniform)
  double spread = 1;  // standard deviation (Normal) or half-width (Uniform)
  double rms_about_center() const { return kind == Normal ? spread : spread / 1.7320508075688772; }
};

// RMS of one block's dequantized values with the super-block scale d = 1 (see above).
double unit_rms(GgmlType t);

// Fills n_blocks blocks of type t at dst. Consumes the generator the same way whatever the chunking,
// so a tensor streamed in pieces is byte-identical to one filled at once. Quantized types cannot hold an
// offset: they get the spread about zero (a norm weight forced to Q4_K comes out centred on 0).
void fill_blocks(GgmlType t, const ValueDist& dist, Rng& rng, uint8_t* dst, int64_t n_blocks);

// IEEE binary16 / bfloat16 from float, round to nearest even (NaN stays NaN).
uint16_t float_to_fp16(float f);
uint16_t float_to_bf16(float f);

}  // namespace mlaconf::synth
