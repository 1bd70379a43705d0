// suites/quant: blocks that use every entry of an IQ type's grid exactly once, so that a comparison of
// their dequantized values with an independent implementation checks the whole transcribed table.
//
// Index placement per type, from the block layouts (ggml-common.h / gguf-formats.md §2); everything else
// (signs, sub-scales, deltas) is left random, with sane f16 scales (random_blocks).
#pragma once
#include <cstdint>
#include <vector>

#include "core/ggml_types.h"
#include "suites/quant/random_blocks.h"

namespace mlaconf::test {

// Grid size of an IQ type with a grid; 0 otherwise.
inline int grid_entries(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS: return 256;
    case GgmlType::IQ2_XS: return 512;
    case GgmlType::IQ2_S: return 1024;
    case GgmlType::IQ3_XXS: return 256;
    case GgmlType::IQ3_S: return 512;
    case GgmlType::IQ1_S: case GgmlType::IQ1_M: return 2048;
    default: return 0;
  }
}

// Grid lookups per 256-value block: 32 groups of 8 values, or 64 groups of 4 for the IQ3 types.
inline int lookups_per_block(GgmlType t) {
  return (t == GgmlType::IQ3_XXS || t == GgmlType::IQ3_S) ? 64 : 32;
}

// Writes grid index `idx` into lookup slot k (0..lookups_per_block-1, in value order) of block b.
inline void put_grid_index(GgmlType t, uint8_t* b, int k, int idx) {
  switch (t) {
    case GgmlType::IQ2_XXS: {  // per 32 values: 4 index bytes at 2 + 8*ib
      b[2 + 8 * (k / 4) + k % 4] = static_cast<uint8_t>(idx);
      break;
    }
    case GgmlType::IQ2_XS: {  // u16 k: low 9 bits
      uint8_t* q = b + 2 + 2 * k;
      const uint16_t v = static_cast<uint16_t>((q[0] | (q[1] << 8)) & ~511);
      put_u16(q, static_cast<uint16_t>(v | idx));
      break;
    }
    case GgmlType::IQ2_S: {  // qs[k] low 8 bits; qh[k/4] bits 2*(k%4)..+1 the high 2
      b[2 + k] = static_cast<uint8_t>(idx);
      uint8_t& qh = b[66 + k / 4];
      const int sh = 2 * (k % 4);
      qh = static_cast<uint8_t>((qh & ~(3 << sh)) | ((idx >> 8) << sh));
      break;
    }
    case GgmlType::IQ3_XXS: {  // qs[k]
      b[2 + k] = static_cast<uint8_t>(idx);
      break;
    }
    case GgmlType::IQ3_S: {  // qs[k] low 8 bits; qh[k/8] bit k%8 the 9th
      b[2 + k] = static_cast<uint8_t>(idx);
      uint8_t& qh = b[66 + k / 8];
      qh = static_cast<uint8_t>((qh & ~(1 << (k % 8))) | ((idx >> 8) << (k % 8)));
      break;
    }
    case GgmlType::IQ1_S: {  // qs[k] low 8 bits; u16 qh[k/4] bits 3*(k%4)..+2 the high 3
      b[2 + k] = static_cast<uint8_t>(idx);
      uint8_t* q = b + 34 + 2 * (k / 4);
      const int sh = 3 * (k % 4);
      const uint16_t v = static_cast<uint16_t>(((q[0] | (q[1] << 8)) & ~(7 << sh)) | ((idx >> 8) << sh));
      put_u16(q, v);
      break;
    }
    case GgmlType::IQ1_M: {  // qs[k] low 8 bits; qh[k/2] bits 0..2 (even k) or 4..6 (odd k)
      b[k] = static_cast<uint8_t>(idx);
      uint8_t& qh = b[32 + k / 2];
      const int sh = (k % 2) ? 4 : 0;
      qh = static_cast<uint8_t>((qh & ~(7 << sh)) | ((idx >> 8) << sh));
      break;
    }
    default: break;
  }
}

// grid_entries / lookups_per_block blocks; lookup k of block b uses entry b * lookups_per_block + k.
inline std::vector<uint8_t> grid_sweep_blocks(GgmlType t, uint32_t seed) {
  const int per = lookups_per_block(t);
  const int nblocks = grid_entries(t) / per;
  const int64_t ts = traits(t).type_size;
  std::vector<uint8_t> b = random_blocks(t, nblocks, seed);
  for (int i = 0; i < nblocks; ++i)
    for (int k = 0; k < per; ++k) put_grid_index(t, b.data() + i * ts, k, i * per + k);
  return b;
}

}  // namespace mlaconf::test
