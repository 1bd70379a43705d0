// mlaconf: the ggml tensor type table (ids, names, block sizes, bytes per block).
//
// This is layout, not math: it says how many bytes a row of a given type occupies, which is all the
// GGUF reader, the reference and the CUDA pipeline need to agree on. Dequantization formulas live in
// reference/dequant (CPU) and optimized/kernels (CUDA), separately, so a shared bug cannot hide.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlaconf {

// Values are ggml's `enum ggml_type` ids, as stored in GGUF tensor infos.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40,
};

struct TypeTraits {
  GgmlType type;
  const char* name;
  int64_t block_size;   // values per block
  int64_t type_size;    // bytes per block
  bool weight_type;     // mlaconf dequantizes it (the types GLM-5 GGUFs use as weights)
};

// The traits of a ggml type id, or nullptr for an id ggml does not define (e.g. 4, 5, 31..33).
const TypeTraits* find_type(uint32_t id);
// Same, for a known enum value (never null).
const TypeTraits& traits(GgmlType t);
const char* type_name(GgmlType t);
// "Q4_K" -> Q4_K; case-insensitive. nullopt for an unknown name.
std::optional<GgmlType> type_from_name(std::string_view name);
// Every type mlaconf can dequantize, in id order.
const std::vector<GgmlType>& weight_types();

// Bytes of one row of ne0 values. Throws InputError when ne0 is not a multiple of the block size.
int64_t row_bytes(GgmlType t, int64_t ne0);

// QK_K, the super-block size of the K and IQ quants.
inline constexpr int64_t kQK_K = 256;

}  // namespace mlaconf
