// suites/reference: what the reference computes, as fx::Array, for the judge of fixtures/
// (fx::judge_tensor at a tolerance class, fx::compare_case for a whole case, fx::tensor_metrics).
#pragma once
#include <cmath>
#include <limits>

#include "fixtures/compare.h"
#include "reference/model.h"
#include "suites/reference/capture.h"

namespace mlaconf::test {

// A record of a Capture: its values in double (not rounded to a file's float32), or its int32 ids.
inline fx::Array array_of(const Record& r) {
  fx::Array a;
  a.shape = r.shape;
  if (r.f.empty() && !r.i.empty()) {
    a.dtype = fx::Dtype::I32;
    a.v.assign(r.i.begin(), r.i.end());
  } else {
    a.dtype = fx::Dtype::F64;
    a.v = r.f;
  }
  return a;
}

// A matrix [rows, cols], row-major.
template <class S>
fx::Array array_of(const ref::Mat<S>& m) {
  fx::Array a;
  a.dtype = fx::Dtype::F64;
  a.shape = {static_cast<int64_t>(m.rows()), static_cast<int64_t>(m.cols())};
  a.v.reserve(static_cast<size_t>(m.size()));
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); ++c) a.v.push_back(static_cast<double>(m(r, c)));
  return a;
}

// The judge's nmse of `actual` against `expected` (fx::tensor_metrics), +inf when a position is finite on
// one side only. For checks whose bound is tighter than any tolerance class: two runs of the same
// implementation (decode vs recompute, absorbed vs naive) or two float64 implementations of the same
// sums, which agree to ~1e-30, far below the class bounds of cross-precision comparisons.
inline double nmse_of(const fx::Array& expected, const fx::Array& actual) {
  const fx::DatasetResult r = fx::tensor_metrics(expected, actual);
  return r.nonfinite_mismatch ? std::numeric_limits<double>::infinity() : r.nmse;
}

}  // namespace mlaconf::test
