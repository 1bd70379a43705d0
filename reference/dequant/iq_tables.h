// mlaconf reference: the lookup tables of the IQ and FP4 types, as data (ggml-common.h at ggml-org/ggml
// d99724f; ../shared/docs/gguf-formats.md §2).
//
// Grid entries pack 8 (or 4) unsigned byte magnitudes, little-endian: byte j of the entry is the
// magnitude of value j. IQ1_S/IQ1_M grid bytes are signed (-1, 0, 1).
#pragma once
#include <cstdint>

namespace mlaconf::ref::detail {

// Non-linear 4-bit codebook of IQ4_NL and IQ4_XS.
extern const int8_t kvalues_iq4nl[16];
// E2M1 values doubled (0, .5, 1, 1.5, 2, 3, 4, 6 and negatives, times 2) for MXFP4.
extern const int8_t kvalues_mxfp4[16];

// 7 stored sign bits -> 8 sign bits: the 8th is the parity, making every sign pattern even.
extern const uint8_t ksigns_iq2xs[128];
// Bit j selects the sign of value j.
extern const uint8_t kmask_iq2xs[8];

extern const uint64_t iq2xxs_grid[256];
extern const uint64_t iq2xs_grid[512];
extern const uint64_t iq2s_grid[1024];
extern const uint32_t iq3xxs_grid[256];
extern const uint32_t iq3s_grid[512];
extern const uint64_t iq1s_grid[2048];

// IQ1_S / IQ1_M: the shift added to every grid value (negated by a per-group sign bit).
inline constexpr float kIQ1S_DELTA = 0.125f;

}  // namespace mlaconf::ref::detail
