// suites/quant: random ggml blocks with finite, sane scales, for cross-checks on every decode path.
//
// Every byte pattern is a valid block; only the f16 scale fields need taming so that the products stay
// finite and away from subnormals (those corners are tested separately, by hand).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "core/ggml_types.h"

namespace mlaconf::test {

// A finite f16 with biased exponent in [5, 19] (magnitude about 2^-10 .. 2^4.99), random sign and mantissa.
inline uint16_t sane_f16(std::mt19937& rng) {
  const uint32_t r = rng();
  const uint16_t exp = static_cast<uint16_t>(5 + r % 15);
  return static_cast<uint16_t>(((r >> 8) & 0x8000u) | (exp << 10) | ((r >> 4) & 0x3FFu));
}

inline void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// Byte offsets of the f16 scale fields of one block (ggml-common.h); empty for F32/F16/BF16/MXFP4/IQ1_M.
inline std::vector<int> f16_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    case GgmlType::Q6_K: return {208};
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
    case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S: case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S: case GgmlType::IQ1_S:
      return {0};
    default: return {};
  }
}

// IQ1_M keeps its f16 d in the top nibbles of the four u16 scale words at bytes 48..55.
inline void set_iq1m_d(uint8_t* block, uint16_t d) {
  for (int k = 0; k < 4; ++k) {
    uint8_t& hi = block[48 + 2 * k + 1];
    hi = static_cast<uint8_t>((hi & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
  }
}

// n_blocks random blocks of type t (for block-size-1 types: n_blocks values).
inline std::vector<uint8_t> random_blocks(GgmlType t, int64_t n_blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  const TypeTraits& tt = traits(t);
  std::vector<uint8_t> b(static_cast<size_t>(n_blocks * tt.type_size));
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* blk = b.data() + i * tt.type_size;
    switch (t) {
      case GgmlType::F32: {  // finite: exponent never 255
        if ((blk[3] & 0x7F) == 0x7F && (blk[2] & 0x80)) blk[3] &= 0xBF;
        break;
      }
      case GgmlType::F16: if ((blk[1] & 0x7C) == 0x7C) blk[1] &= 0xBF; break;
      case GgmlType::BF16: if ((blk[1] & 0x7F) == 0x7F && (blk[0] & 0x80)) blk[1] &= 0xBF; break;
      case GgmlType::MXFP4: blk[0] = static_cast<uint8_t>(118 + rng() % 20); break;  // 2^-10 .. 2^9
      case GgmlType::IQ1_M: set_iq1m_d(blk, sane_f16(rng)); break;
      default:
        for (int off : f16_fields(t)) put_u16(blk + off, sane_f16(rng));
    }
  }
  return b;
}

}  // namespace mlaconf::test
