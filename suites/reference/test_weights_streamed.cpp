// suites/reference: the output head in bounded memory (issue 11). Weights::linear_blocked dequantizes a
// 2-D tensor a block of rows at a time; on the tiny model's output head it must give the logits of the
// whole dequantized matrix, up to the rounding of the dot products (Eigen's summation order depends on
// the product's shape), for any block size (blocks that split the vocabulary unevenly included); a
// wrong row offset (the negative control: every block gets the first block's rows) must be caught.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>

#include "core/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/weight_layout.h"
#include "reference/ops.h"
#include "reference/weights.h"

namespace mlaconf::ref {
namespace {

const std::string kModel = std::string(MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.gguf";

template <class S>
Mat<S> random_input(int64_t T, int64_t E) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> n(0, 1);
  Mat<S> x(T, E);
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<S>(n(rng));
  return x;
}

// Measured on the tiny model (blocks of 1, 7, 1000, 2047, 2048, 2051 rows of 2048): at most 2.11 (f32) and
// 1.68 (f64), 0 where Eigen takes the same path; the bound is about 10x that (a dot product's worst case
// is n = hidden = 256 here). A block offset bug gives differences of the order of the logits themselves.
constexpr double kMaxRatio = 20.0;

template <class S>
double ratio(const Mat<S>& a, const Mat<S>& b, const Mat<S>& scale) {
  double r = 0;
  const double eps = std::numeric_limits<S>::epsilon();
  for (Eigen::Index i = 0; i < a.size(); ++i)
    r = std::max(r, std::abs(double(a.data()[i]) - double(b.data()[i])) / (eps * std::max(double(scale.data()[i]), 1e-30)));
  return r;
}

template <class S>
void blocked_equals_whole() {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "skipped: shared data absent (" << kModel << ")";
  GgufFile f = GgufFile::open(kModel);
  ModelConfig c = ModelConfig::from_gguf(f);
  Weights<S> w(f, c, 1 << 20);
  const Mat<S> x = random_input<S>(5, c.n_embd);
  const Mat<S> whole = linear<S>(x, w.mat(wname::kOutput));
  const Mat<S> scale = x.cwiseAbs() * w.mat(wname::kOutput).cwiseAbs().transpose();  // sum_k |x_k w_k|
  for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{1000}, c.n_vocab - 1, c.n_vocab, c.n_vocab + 3}) {
    Weights<S> fresh(f, c, 1 << 20);
    const Mat<S> b = fresh.linear_blocked(wname::kOutput, x, rows);
    ASSERT_EQ(b.rows(), whole.rows());
    ASSERT_EQ(b.cols(), whole.cols());
    // Each logit is the same dot product of one weight row with one input row, but Eigen's GEMM sums it in
    // an order that depends on the product's shape, so the last bits may differ. Unit: the difference over
    // eps(S) * sum_k |x_k w_k| (the scale of a dot product's rounding error).
    const double r = ratio<S>(b, whole, scale);
    std::printf("  %s block of %lld rows: max |diff| / (eps * sum|x w|) = %.3g\n", sizeof(S) == 4 ? "f32" : "f64",
                static_cast<long long>(rows), r);
    EXPECT_LE(r, kMaxRatio) << "block of " << rows << " rows";
    EXPECT_EQ(fresh.dense_bytes(), 0u) << "the blocked head is never cached";
  }
  // linear_streamed: the tiny head is small, so it takes the cached path (same values).
  Weights<S> s(f, c, 1 << 20);
  EXPECT_EQ((s.linear_streamed(wname::kOutput, x) - whole).cwiseAbs().maxCoeff(), S(0)) << "the same product";
  // Negative control: the first block's rows for every block gives other logits.
  const int64_t rows = 7;
  Mat<S> wrong(x.rows(), c.n_vocab);
  Weights<S> nc(f, c, 1 << 20);
  const Mat<S> first = nc.linear_blocked(wname::kOutput, x, rows).leftCols(rows);
  for (int64_t r0 = 0; r0 < c.n_vocab; r0 += rows) {
    const int64_t n = std::min(rows, c.n_vocab - r0);
    wrong.middleCols(r0, n) = first.leftCols(n);
  }
  EXPECT_GT(ratio<S>(wrong, whole, scale), 1000 * kMaxRatio) << "a block offset bug must show";
}

TEST(weights_streamed, output_head_blocked_equals_whole_f32) { blocked_equals_whole<float>(); }
TEST(weights_streamed, output_head_blocked_equals_whole_f64) { blocked_equals_whole<double>(); }

TEST(weights_streamed, width_mismatch_is_input_error) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "skipped: shared data absent (" << kModel << ")";
  GgufFile f = GgufFile::open(kModel);
  ModelConfig c = ModelConfig::from_gguf(f);
  Weights<float> w(f, c, 1 << 20);
  EXPECT_THROW(w.linear_blocked(wname::kOutput, random_input<float>(2, c.n_embd + 1), 16), InputError);
}

}  // namespace
}  // namespace mlaconf::ref
