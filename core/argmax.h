// mlaconf: the greedy pick of a logits row, as every driver of a backend (tools/, suites/) makes it.
//
// Ties go to the LOWER id (the oracle's convention); `margin` = top-1 minus top-2 logit (0 for one
// entry). NaN entries are never picked. The reference and the CUDA pipeline keep their own copies for
// their own generate(): the two halves share no logic, so a bug here cannot hide behind itself there.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mlaconf {

// T: double (the reference's logits, captures) or float (the CUDA pipeline's logits, read in place: a
// driver that copied each 154880-entry row into doubles first spent ~0.5 ms (B = 1) to ~3 ms (B = 8) of
// host time per decode step on the H200 host, during which the device idled).
template <class T>
inline int32_t argmax_lower(const T* row, size_t n, double* margin = nullptr) {
  int64_t best = -1, second = -1;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(row[i])) continue;
    if (best < 0 || row[i] > row[best]) {  // strictly greater: ties keep the lower id
      second = best;
      best = static_cast<int64_t>(i);
    } else if (second < 0 || row[i] > row[second]) {
      second = static_cast<int64_t>(i);
    }
  }
  if (margin) *margin = second < 0 ? 0.0 : (double)row[best] - (double)row[second];
  return static_cast<int32_t>(best);
}
inline int32_t argmax_lower(const std::vector<double>& row, double* margin = nullptr) {
  return argmax_lower(row.data(), row.size(), margin);
}

}  // namespace mlaconf
