// suites/gpu: the kernels' inputs as the reference functions take them (Eigen, float64), and back.
// No math here: the expected results come from reference/ (ops.h, mla.h, indexer.h, dequant).
#pragma once
#include <cstdint>
#include <vector>

#include "core/ggml_types.h"
#include "optimized/api.h"
#include "reference/dequant/dequant.h"
#include "reference/ops.h"

namespace mlaconf::gputest {

using MatD = ref::Mat<double>;
using VecD = ref::Vec<double>;

template <class T>
MatD mat_of(const std::vector<T>& v, int64_t rows, int64_t cols, int64_t offset = 0) {
  MatD m(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) m.data()[i] = (double)v[offset + i];
  return m;
}
inline MatD mat_of_half(const std::vector<uint16_t>& bits, int64_t rows, int64_t cols, int64_t offset = 0) {
  MatD m(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) m.data()[i] = cuda::half_bits_to_float_host(bits[offset + i]);
  return m;
}
template <class T>
VecD vec_of(const std::vector<T>& v) {
  VecD x((int64_t)v.size());
  for (size_t i = 0; i < v.size(); ++i) x[(int64_t)i] = (double)v[i];
  return x;
}
inline std::vector<double> flat(const MatD& m) { return std::vector<double>(m.data(), m.data() + m.size()); }
template <class T>
std::vector<double> as_f64(const std::vector<T>& v) { return std::vector<double>(v.begin(), v.end()); }

// rows x cols weights of type t, dequantized by the reference (float, exactly ggml's values).
inline std::vector<float> ref_dequant(GgmlType t, const std::vector<uint8_t>& blocks, int64_t n, int64_t byte_offset = 0) {
  std::vector<float> out(n);
  ref::dequantize(t, blocks.data() + byte_offset, out.data(), n);
  return out;
}

}  // namespace mlaconf::gputest
