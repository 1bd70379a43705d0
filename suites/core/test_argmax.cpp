// core/argmax.h: the one greedy pick every driver makes (ties to the lower id, NaN never picked, the
// margin top-1 minus top-2), the same on float rows (the CUDA pipeline's logits, read in place) as on
// double rows; suites/gpu batch.argmax_rows holds the device's argmax_rows to it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/argmax.h"

namespace mlaconf {
namespace {

template <class T>
void rules() {
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  double m = -1;
  const std::vector<T> tie = {1, 3, 2, 3, 3};
  EXPECT_EQ(argmax_lower(tie.data(), tie.size(), &m), 1);
  EXPECT_EQ(m, 0.0);
  const std::vector<T> margin = {1, 5, 2.5, -7};
  EXPECT_EQ(argmax_lower(margin.data(), margin.size(), &m), 1);
  EXPECT_EQ(m, 2.5);
  const std::vector<T> with_nan = {nan, 2, nan, 4, nan};
  EXPECT_EQ(argmax_lower(with_nan.data(), with_nan.size(), &m), 3);
  EXPECT_EQ(m, 2.0);
  const std::vector<T> zeros = {-0.0, 0.0, -1};  // -0 == +0: the lower id
  EXPECT_EQ(argmax_lower(zeros.data(), zeros.size()), 0);
  const std::vector<T> minf = {-inf, -inf};
  EXPECT_EQ(argmax_lower(minf.data(), minf.size(), &m), 0);
  const std::vector<T> all_nan = {nan, nan};
  EXPECT_EQ(argmax_lower(all_nan.data(), all_nan.size(), &m), -1);
  EXPECT_EQ(m, 0.0);
  EXPECT_EQ(argmax_lower(all_nan.data(), 0, &m), -1);
  const std::vector<T> one = {7};
  EXPECT_EQ(argmax_lower(one.data(), one.size(), &m), 0);
  EXPECT_EQ(m, 0.0);
}

TEST(argmax, rules_double) { rules<double>(); }
TEST(argmax, rules_float) { rules<float>(); }

// A float row and its double copy pick the same id with the same margin (the CUDA drivers now read the
// floats in place instead of copying them).
TEST(argmax, float_row_equals_its_double_copy) {
  std::vector<float> f(154880);
  for (size_t i = 0; i < f.size(); ++i) f[i] = (float)std::sin(0.37 * (double)i) * 3.f;
  f[99999] = 3.5f, f[120000] = 3.5f;
  const std::vector<double> d(f.begin(), f.end());
  double mf = 0, md = 0;
  EXPECT_EQ(argmax_lower(f.data(), f.size(), &mf), argmax_lower(d, &md));
  EXPECT_EQ(mf, md);
  EXPECT_EQ(argmax_lower(f.data(), f.size()), 99999);
}

}  // namespace
}  // namespace mlaconf
