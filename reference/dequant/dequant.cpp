// mlaconf reference: dispatch from a ggml type to its row dequantizer, and tensor/row-range access.
#include "reference/dequant/dequant.h"

#include <string>

#include "core/error.h"
#include "reference/dequant/row_dequantizers.h"

namespace mlaconf::ref {
namespace {

using RowFn = void (*)(const uint8_t*, float*, int64_t);

// nullptr for a type that is defined but not dequantized here (Q8_1, Q8_K, integer types, TQ*, ...).
RowFn row_function(GgmlType t) {
  using namespace detail;
  switch (t) {
    case GgmlType::F32: return dequantize_row_f32;
    case GgmlType::F16: return dequantize_row_f16;
    case GgmlType::BF16: return dequantize_row_bf16;
    case GgmlType::Q4_0: return dequantize_row_q4_0;
    case GgmlType::Q4_1: return dequantize_row_q4_1;
    case GgmlType::Q5_0: return dequantize_row_q5_0;
    case GgmlType::Q5_1: return dequantize_row_q5_1;
    case GgmlType::Q8_0: return dequantize_row_q8_0;
    case GgmlType::Q2_K: return dequantize_row_q2_k;
    case GgmlType::Q3_K: return dequantize_row_q3_k;
    case GgmlType::Q4_K: return dequantize_row_q4_k;
    case GgmlType::Q5_K: return dequantize_row_q5_k;
    case GgmlType::Q6_K: return dequantize_row_q6_k;
    case GgmlType::IQ4_NL: return dequantize_row_iq4_nl;
    case GgmlType::IQ4_XS: return dequantize_row_iq4_xs;
    case GgmlType::IQ2_XXS: return dequantize_row_iq2_xxs;
    case GgmlType::IQ2_XS: return dequantize_row_iq2_xs;
    case GgmlType::IQ2_S: return dequantize_row_iq2_s;
    case GgmlType::IQ3_XXS: return dequantize_row_iq3_xxs;
    case GgmlType::IQ3_S: return dequantize_row_iq3_s;
    case GgmlType::IQ1_S: return dequantize_row_iq1_s;
    case GgmlType::IQ1_M: return dequantize_row_iq1_m;
    case GgmlType::MXFP4: return dequantize_row_mxfp4;
    default: return nullptr;
  }
}

std::string type_label(GgmlType t) {
  const TypeTraits* tt = find_type(static_cast<uint32_t>(t));
  return tt ? std::string(tt->name) : "type id " + std::to_string(static_cast<uint32_t>(t));
}

RowFn require_row_function(GgmlType t) {
  RowFn fn = row_function(t);
  if (!fn)
    throw InputError("cannot dequantize ggml type " + type_label(t) +
                     ": not a weight type mlaconf supports (activation-only, integer or ternary type)");
  return fn;
}

}  // namespace

bool can_dequantize(GgmlType t) { return row_function(t) != nullptr; }

void dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n) {
  RowFn fn = require_row_function(t);
  const TypeTraits& tt = traits(t);
  if (n < 0 || n % tt.block_size != 0)
    throw InputError("cannot dequantize " + std::to_string(n) + " values of " + tt.name +
                     ": not a multiple of its block size " + std::to_string(tt.block_size));
  if (n == 0) return;
  if (!src || !dst) throw InputError(std::string("dequantize ") + tt.name + ": null buffer");
  fn(src, dst, n);
}

void dequantize_rows(const TensorInfo& t, int64_t row0, int64_t nrows, float* dst) {
  const std::string what = "tensor '" + t.name + "' (" + type_label(t.type) + ", " + t.shape_string() + ")";
  RowFn fn = row_function(t.type);
  if (!fn)
    throw InputError("cannot dequantize " + what + ": ggml type " + type_label(t.type) +
                     " is not a weight type mlaconf supports");
  const int64_t ne0 = t.ne[0];
  const int64_t rows = t.n_rows();
  if (row0 < 0 || nrows < 0 || row0 > rows || nrows > rows - row0)
    throw InputError("cannot dequantize rows [" + std::to_string(row0) + ", " + std::to_string(row0 + nrows) +
                     ") of " + what + ": it has " + std::to_string(rows) + " rows");
  int64_t rb = 0;
  try {
    rb = row_bytes(t.type, ne0);
  } catch (const InputError& e) {  // ne0 not a multiple of the block size: say which tensor
    throw InputError("cannot dequantize " + what + ": " + e.what());
  }
  if (nrows == 0) return;
  if (!t.data) throw InputError("cannot dequantize " + what + ": its data is not mapped");
  // The reader checks nbytes == rows * row_bytes; a hand-made TensorInfo may not: stay inside it.
  if (static_cast<uint64_t>(row0 + nrows) * static_cast<uint64_t>(rb) > t.nbytes)
    throw InputError("cannot dequantize " + what + ": rows run past its " + std::to_string(t.nbytes) +
                     " data bytes");
  if (!dst) throw InputError("cannot dequantize " + what + ": null output buffer");
  fn(t.data + row0 * rb, dst, nrows * ne0);
}

std::vector<float> dequantize_tensor(const TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  dequantize_rows(t, 0, t.n_rows(), out.data());
  return out;
}

}  // namespace mlaconf::ref
