#include "core/ggml_types.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace mlaconf {
namespace {

// Sizes from ggml's type_traits (ggml.c) and the block structs in ggml-common.h.
constexpr TypeTraits kTypes[] = {
    {GgmlType::F32, "F32", 1, 4, true},
    {GgmlType::F16, "F16", 1, 2, true},
    {GgmlType::Q4_0, "Q4_0", 32, 18, true},
    {GgmlType::Q4_1, "Q4_1", 32, 20, true},
    {GgmlType::Q5_0, "Q5_0", 32, 22, true},
    {GgmlType::Q5_1, "Q5_1", 32, 24, true},
    {GgmlType::Q8_0, "Q8_0", 32, 34, true},
    {GgmlType::Q8_1, "Q8_1", 32, 36, false},
    {GgmlType::Q2_K, "Q2_K", 256, 84, true},
    {GgmlType::Q3_K, "Q3_K", 256, 110, true},
    {GgmlType::Q4_K, "Q4_K", 256, 144, true},
    {GgmlType::Q5_K, "Q5_K", 256, 176, true},
    {GgmlType::Q6_K, "Q6_K", 256, 210, true},
    {GgmlType::Q8_K, "Q8_K", 256, 292, false},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66, true},
    {GgmlType::IQ2_XS, "IQ2_XS", 256, 74, true},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98, true},
    {GgmlType::IQ1_S, "IQ1_S", 256, 50, true},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18, true},
    {GgmlType::IQ3_S, "IQ3_S", 256, 110, true},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82, true},
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136, true},
    {GgmlType::I8, "I8", 1, 1, false},
    {GgmlType::I16, "I16", 1, 2, false},
    {GgmlType::I32, "I32", 1, 4, false},
    {GgmlType::I64, "I64", 1, 8, false},
    {GgmlType::F64, "F64", 1, 8, false},
    {GgmlType::IQ1_M, "IQ1_M", 256, 56, true},
    {GgmlType::BF16, "BF16", 1, 2, true},
    {GgmlType::TQ1_0, "TQ1_0", 256, 54, false},
    {GgmlType::TQ2_0, "TQ2_0", 256, 66, false},
    {GgmlType::MXFP4, "MXFP4", 32, 17, true},
    {GgmlType::NVFP4, "NVFP4", 64, 36, false},
};

}  // namespace

const TypeTraits* find_type(uint32_t id) {
  for (const auto& t : kTypes)
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

const TypeTraits& traits(GgmlType t) {
  const TypeTraits* p = find_type(static_cast<uint32_t>(t));
  if (!p) throw InputError("unknown ggml type id " + std::to_string(static_cast<uint32_t>(t)));
  return *p;
}

const char* type_name(GgmlType t) { return traits(t).name; }

std::optional<GgmlType> type_from_name(std::string_view name) {
  for (const auto& t : kTypes) {
    std::string_view n = t.name;
    if (n.size() == name.size() &&
        std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
          return std::toupper(static_cast<unsigned char>(a)) == std::toupper(static_cast<unsigned char>(b));
        }))
      return t.type;
  }
  return std::nullopt;
}

const std::vector<GgmlType>& weight_types() {
  static const std::vector<GgmlType> v = [] {
    std::vector<GgmlType> r;
    for (const auto& t : kTypes)
      if (t.weight_type) r.push_back(t.type);
    return r;
  }();
  return v;
}

int64_t row_bytes(GgmlType t, int64_t ne0) {
  const TypeTraits& tt = traits(t);
  if (ne0 < 0 || ne0 % tt.block_size != 0)
    throw InputError(std::string("row of ") + std::to_string(ne0) + " values is not a multiple of the " +
                     tt.name + " block size " + std::to_string(tt.block_size));
  return ne0 / tt.block_size * tt.type_size;
}

}  // namespace mlaconf
