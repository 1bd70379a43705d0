// suites/gpu: the tensor-core dequant GEMV for Q4_K and Q6_K (optimized/gemv_mma.cu), pinned by passing
// GemvKernel::Mma; the default runs it where gemv_mma_by_default says (checked by default_dispatch below).
//
// Its fp32 order is the tensor cores' (not emulated on the host), so each case is judged two ways
// (suites/gpu/gemv_bits.h, the checks shared with the SIMT suites): (1) every output against float64 on the
// reference dequantizer's weights, |got - want| <= kMmaBound * sum |w x|; (3) every batch entry (B x on one
// matrix, experts by id, x shared by the experts of one token) bit-identical to the same x alone.
// kMmaBound: every product of the weights' integers with x's 16-bit terms is exact, so the error is x's
// representation and the fp32 accumulation's. The bound is 7e-7: x carried as two fp16 terms scaled per block
// (x to ~2^-22 of itself; bench/x_terms_error.py: at most 1.5e-8 of sum |w x|, 47x under the bound); the worst
// seen on the H200 over these cases with x as three 16-bit terms was 6.9e-8, and 1.4e-7 (16897 x 512) for Q4_K's
// whole-block accumulation (sc q x before scaling), 5x under. The fault gemv-x-bf16 (x as one fp16 term) shows ~1e-4.
// Shapes: rows off the 16-row tile (1, 15, 17, 33, 257: 2 tiles per CTA, K over 4 warps) and past each
// row-tile-per-CTA threshold (2065, 4225, 8449, 16897 rows: 1, 2, 4, 8 tiles per CTA, so 8, 4, 2, 1 warps
// split K), blocks per row 1, 2, 11, 24 (K split
// unevenly over the warps, warps without blocks), batches 1, 2, 3, 8, 17 (8 x per pass: 17 is three passes,
// the last with one x), and 5-33 on shapes where passes of 16 x are possible. Expert strides stay 16-byte aligned (rows x row bytes; a misaligned matrix takes the SIMT kernels, whose
// bits differ); 64 x on one matrix (8 entry groups, adjacent in the grid); 11
// entries on one expert, interleaved with others (each entry its own CTAs; bits as run alone), and 20; a shared
// expert as id -1 (experts_alt: bits as its matrix run alone by gemv). Negative
// control: the fault gemv-x-bf16 (x kept as one 16-bit term) must fail (1). default_dispatch: on both sides of
// each of the rule's thresholds the default gives the bits of the kernel the rule names, which differ from
// the other kernel's (so the check can fail).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <tuple>
#include <utility>

#include "optimized/api.h"
#include "optimized/faults.h"
#include "optimized/gemv_mma.cuh"
#include "suites/gpu/gemv_bits.h"
#include "suites/gpu/gpu_test_util.h"
#include "suites/gpu/host_ref.h"

namespace mlaconf::gputest {
namespace {

constexpr double kMmaBound = 7e-7;
constexpr cuda::GemvKernel kMma = cuda::GemvKernel::Mma;

MakeEmulation no_emulation() {
  return [](const std::vector<uint8_t>&, const std::vector<float>&) { return RowEmulation{}; };
}

void batch_case(GgmlType t, int64_t rows, int64_t cols, int B) {
  MLACONF_REQUIRE_CUDA();
  gemv_batch_check(kMma, t, rows, cols, B, 3000 + 7 * rows + cols + (int)t, 41 + B, no_emulation(), kMmaBound);
}

void experts_case(GgmlType t, int64_t rows, int64_t cols, std::vector<int32_t> ids) {
  MLACONF_REQUIRE_CUDA();
  gemv_experts_check(kMma, t, rows, cols, ids, 4, 97 + (int)t, 13, no_emulation(), kMmaBound);
}

// The experts of one token read the same x (x_stride 0, as the pipeline's decode step of one token does):
// each entry against float64 and bit-identical to its expert run alone on that x.
void experts_shared_x_case(GgmlType t, int64_t rows, int64_t cols) {
  MLACONF_REQUIRE_CUDA();
  const std::vector<int32_t> ids = {3, 0, 2, 3, 1};
  const int64_t n = (int64_t)ids.size(), pool = 4;
  const auto blocks = random_blocks(t, pool * rows * cols / 256, 555 + (int)t);
  const auto W = ref_dequant(t, blocks, pool * rows * cols);
  const auto x1 = random_x(cols, 77);
  std::vector<float> x;  // the judge's layout: one x per entry
  for (int64_t j = 0; j < n; ++j) x.insert(x.end(), x1.begin(), x1.end());
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x1), d_ids = cuda::to_device(ids);
  cuda::DeviceBuffer d_y((size_t)n * rows * 4);
  const int64_t stride = rows * row_bytes(t, cols);
  cuda::gemv_experts(t, d_w.get(), stride, d_ids.as<int32_t>(), n, rows, cols, d_x.as<float>(), 0, d_y.as<float>(), rows, nullptr, kMma);
  const auto got = cuda::to_host<float>(d_y, (size_t)n * rows);
  const Judged j = judge_gemv(got, W, std::vector<int64_t>(ids.begin(), ids.end()), x, rows, cols, RowEmulation{});
  std::printf("  experts, one x: max |err| / sum|wx| %.3e (bound %.0e)\n", j.worst, kMmaBound);
  EXPECT_LE(j.worst, kMmaBound);
  const int64_t differ = entries_unlike_alone(got, n, rows, [&](int64_t e, float* d_y1) {
    cuda::gemv(t, static_cast<const uint8_t*>(d_w.get()) + ids[e] * stride, rows, cols, d_x.as<float>(), d_y1, 1, 0, 0, 0, kMma);
  });
  EXPECT_EQ(differ, 0) << differ << " of " << n << " experts differ from the matrix run alone";
}

// The inputs of a launch of experts by id with a shared expert as id -1: a pool of 4 experts and the shared matrix (a
// buffer of its own), x (one for all, or one per entry), ids, on the host and the device. seed: the pool's (the
// shared matrix's is seed + 1).
struct AltExperts {
  std::vector<uint8_t> blocks, alt;
  std::vector<float> xs;
  cuda::DeviceBuffer d_w, d_alt, d_x, d_ids;
  int64_t stride;
};
AltExperts alt_experts(GgmlType t, int64_t rows, int64_t cols, const std::vector<int32_t>& ids, bool one_x, uint64_t seed,
                       uint64_t x_seed) {
  AltExperts e;
  e.blocks = random_blocks(t, 4 * rows * cols / 256, seed);
  e.alt = random_blocks(t, rows * cols / 256, seed + 1);
  e.xs = random_x((size_t)(one_x ? 1 : ids.size()) * cols, x_seed);
  e.d_w = cuda::to_device(e.blocks), e.d_alt = cuda::to_device(e.alt), e.d_x = cuda::to_device(e.xs), e.d_ids = cuda::to_device(ids);
  e.stride = rows * row_bytes(t, cols);
  return e;
}

// A shared expert as one more entry (id -1 takes the matrix at d_w_alt, a buffer of its own): every entry
// against float64 and bit-identical to its matrix run alone by gemv (the shared matrix's own path), with one x
// for all (the pipeline's one-token step) or one per entry (20 entries, two of them -1).
void experts_alt_case(GgmlType t, int64_t rows, int64_t cols, std::vector<int32_t> ids, bool one_x) {
  MLACONF_REQUIRE_CUDA();
  ASSERT_TRUE(cuda::gemv_experts_mma_ok(t, rows, cols, kMma));
  const int64_t n = (int64_t)ids.size(), pool = 4;
  AltExperts in = alt_experts(t, rows, cols, ids, one_x, 909 + (int)t, 78);
  auto all = in.blocks;
  all.insert(all.end(), in.alt.begin(), in.alt.end());
  const auto W = ref_dequant(t, all, (pool + 1) * rows * cols);  // the judge's matrix `pool` is the alt one
  const auto& xs = in.xs;
  std::vector<float> x;  // the judge's layout: one x per entry
  for (int64_t j = 0; j < n; ++j) x.insert(x.end(), xs.begin() + (one_x ? 0 : j * cols), xs.begin() + (one_x ? 1 : j + 1) * cols);
  const auto &d_w = in.d_w, &d_alt = in.d_alt, &d_x = in.d_x, &d_ids = in.d_ids;
  cuda::DeviceBuffer d_y((size_t)n * rows * 4);
  const int64_t stride = in.stride;
  cuda::gemv_experts(t, d_w.get(), stride, d_ids.as<int32_t>(), n, rows, cols, d_x.as<float>(), one_x ? 0 : cols, d_y.as<float>(),
                     rows, d_alt.get(), kMma);
  const auto got = cuda::to_host<float>(d_y, (size_t)n * rows);
  std::vector<int64_t> mats;
  for (int32_t id : ids) mats.push_back(id < 0 ? pool : id);
  const Judged j = judge_gemv(got, W, mats, x, rows, cols, RowEmulation{});
  std::printf("  experts with a shared one: max |err| / sum|wx| %.3e (bound %.0e)\n", j.worst, kMmaBound);
  EXPECT_LE(j.worst, kMmaBound);
  const int64_t differ = entries_unlike_alone(got, n, rows, [&](int64_t e, float* d_y1) {
    const void* w1 = ids[e] < 0 ? d_alt.get() : static_cast<const void*>(static_cast<const uint8_t*>(d_w.get()) + ids[e] * stride);
    cuda::gemv(t, w1, rows, cols, d_x.as<float>() + (one_x ? 0 : e * cols), d_y1, 1, 0, 0, 0, kMma);
  });
  EXPECT_GT(std::count(ids.begin(), ids.end(), -1), 0);
  EXPECT_EQ(differ, 0) << differ << " of " << n << " entries differ from their matrix run alone";
}

// Pairs grouped by expert (group_pairs, then gemv_experts_grouped with the output rows back in pair order), each
// pair its own x: the table checked on the host (slots a stable sort of the pairs by expert; groups in slot order
// covering every slot once, each inside one expert's run and two slot pairs), then every pair against float64
// and bit-identical to its expert run alone by id. xs set: whether the shape shares x through shared memory
// (gemv_mma_cta), which the case must take as named.
void experts_grouped_case(GgmlType t, int64_t rows, int64_t cols, std::vector<int32_t> ids, int64_t pool,
                          std::optional<bool> xs = std::nullopt) {
  MLACONF_REQUIRE_CUDA();
  const int64_t n = (int64_t)ids.size();
  if (xs) {
    EXPECT_EQ(cuda::gemv_mma_cta(rows, cols, n, true, true).xs, *xs) << "the case must take the path it names";
  }
  const auto blocks = random_blocks(t, pool * rows * cols / 256, 1212 + (int)t);
  const auto W = ref_dequant(t, blocks, pool * rows * cols);
  const auto x = random_x((size_t)n * cols, 31);
  std::vector<int32_t> tok(n);
  for (int64_t j = 0; j < n; ++j) tok[j] = (int32_t)j;
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x), d_ids = cuda::to_device(ids), d_tok = cuda::to_device(tok);
  cuda::DeviceBuffer d_ord((size_t)n * 4), d_ts((size_t)n * 4), d_grp((size_t)n * 16), d_ng(4), d_xs((size_t)n * cols * 4),
      d_y((size_t)n * rows * 4);
  cuda::group_pairs(d_ids.as<int32_t>(), d_tok.as<int32_t>(), n, d_ord.as<int32_t>(), d_ts.as<int32_t>(), d_grp.as<int32_t>(),
                    d_ng.as<int32_t>());
  cuda::gather_rows(d_x.as<float>(), cols, d_ts.as<int32_t>(), n, cols, d_xs.as<float>(), cols);
  const int64_t stride = rows * row_bytes(t, cols);
  cuda::gemv_experts_grouped(t, d_w.get(), stride, rows, cols, d_grp.as<int32_t>(), d_ng.as<int32_t>(), n, d_xs.as<float>(), cols,
                             d_y.as<float>(), rows, d_ord.as<int32_t>(), kMma);
  // The table.
  const auto ord = cuda::to_host<int32_t>(d_ord, n), ts = cuda::to_host<int32_t>(d_ts, n);
  const int32_t ng = cuda::to_host<int32_t>(d_ng, 1)[0];
  ASSERT_GT(ng, 0);
  ASSERT_LE(ng, n);
  const auto grp = cuda::to_host<int32_t>(d_grp, (size_t)ng * 4);
  std::vector<int32_t> want(n);
  for (int64_t j = 0; j < n; ++j) want[j] = (int32_t)j;
  std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return ids[a] < ids[b]; });
  EXPECT_EQ(ord, want) << "slots are not the pairs stably sorted by expert";
  for (int64_t s2 = 0; s2 < n; ++s2) EXPECT_EQ(ts[s2], tok[ord[s2]]);
  int64_t next = 0, multi = 0;
  for (int32_t g = 0; g < ng; ++g) {
    const int32_t e = grp[4 * g], b = grp[4 * g + 1], end = grp[4 * g + 2];
    EXPECT_EQ(b, next) << "group " << g;
    EXPECT_GT(end, b) << "group " << g;
    EXPECT_LE((end - 1) / 2 - b / 2, 1) << "group " << g << " spans more than two slot pairs";
    for (int32_t s2 = b; s2 < end && s2 < n; ++s2) EXPECT_EQ(ids[ord[s2]], e) << "slot " << s2 << " in group " << g;
    multi += end - b > 1;
    next = end;
  }
  EXPECT_EQ(next, n) << "the groups do not cover the slots";
  EXPECT_GT(multi, 0) << "no group holds two pairs: nothing shared";
  // The products.
  const auto got = cuda::to_host<float>(d_y, (size_t)n * rows);
  const Judged j = judge_gemv(got, W, std::vector<int64_t>(ids.begin(), ids.end()), x, rows, cols, RowEmulation{});
  std::printf("  %d groups for %lld pairs: max |err| / sum|wx| %.3e (bound %.0e)\n", ng, (long long)n, j.worst, kMmaBound);
  EXPECT_LE(j.worst, kMmaBound);
  const int64_t differ = entries_unlike_alone(got, n, rows, [&](int64_t e, float* d_y1) {
    cuda::DeviceBuffer d_id = cuda::to_device(std::vector<int32_t>{ids[e]});
    cuda::gemv_experts(t, d_w.get(), stride, d_id.as<int32_t>(), 1, rows, cols, d_x.as<float>() + e * cols, cols, d_y1, rows, nullptr, kMma);
  });
  EXPECT_EQ(differ, 0) << differ << " of " << n << " pairs differ from their expert run alone";
}

// Negative control: with x kept as its first 16-bit term (gemv-x-bf16) the float64 check must fail by far;
// without the fault the same case passes.
void negative_control_case(GgmlType t) {
  MLACONF_REQUIRE_CUDA();
  const int64_t rows = 33, cols = 2048;
  const auto blocks = random_blocks(t, rows * cols / 256, 4343 + (int)t);
  const auto W = ref_dequant(t, blocks, rows * cols);
  const auto x = random_x(cols, 19);
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y(rows * 4);
  cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>(), d_y.as<float>(), 1, 0, 0, 0, kMma);
  const Judged ok = judge_gemv(cuda::to_host<float>(d_y, rows), W, {0}, x, rows, cols, RowEmulation{});
  {
    cuda::ScopedFault f(cuda::Fault::GemvXBf16);
    cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>(), d_y.as<float>(), 1, 0, 0, 0, kMma);
  }
  const Judged bad = judge_gemv(cuda::to_host<float>(d_y, rows), W, {0}, x, rows, cols, RowEmulation{});
  std::printf("  correct: %.3e, gemv-x-bf16: %.3e (bound %.0e)\n", ok.worst, bad.worst, kMmaBound);
  EXPECT_LE(ok.worst, kMmaBound);
  EXPECT_GT(bad.worst, 10 * kMmaBound);
}

// x far from [-1, 1] (Q4_K's x terms are fp16, scaled per 256-value block by a power of two): entries of
// magnitude 2^-100 (the scale's limit of 2^100 is reached), 2^-30, 2^40 and 2^100, and one whose blocks
// alternate 2^-60 and 2^60 with a quarter of each block's values 2^-20 of the rest; each entry judged against
// float64 like every other case, and finite.
void x_range_case(GgmlType t) {
  MLACONF_REQUIRE_CUDA();
  const int64_t rows = 33, cols = 2048;
  const int B = 5;
  const auto blocks = random_blocks(t, rows * cols / 256, 5151 + (int)t);
  const auto W = ref_dequant(t, blocks, rows * cols);
  auto x = random_x((size_t)B * cols, 29);
  const double kScale[] = {0x1p-100, 0x1p-30, 0x1p40, 0x1p100};
  for (int b = 0; b < 4; ++b)
    for (int64_t i = 0; i < cols; ++i) x[b * cols + i] = (float)(x[b * cols + i] * kScale[b]);
  for (int64_t i = 0; i < cols; ++i)
    x[4 * cols + i] = (float)(x[4 * cols + i] * ((i / 256) % 2 ? 0x1p60 : 0x1p-60) * (i % 4 == 1 ? 0x1p-20 : 1.0));
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(x);
  cuda::DeviceBuffer d_y((size_t)B * rows * 4);
  cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>(), d_y.as<float>(), B, 0, cols, rows, kMma);
  const auto got = cuda::to_host<float>(d_y, (size_t)B * rows);
  for (int b = 0; b < B; ++b) {
    const std::vector<float> xb(x.begin() + b * cols, x.begin() + (b + 1) * cols);
    const std::vector<float> gb(got.begin() + b * rows, got.begin() + (b + 1) * rows);
    const Judged j = judge_gemv(gb, W, {0}, xb, rows, cols, RowEmulation{});
    std::printf("  entry %d: max |err| / sum|wx| %.3e (bound %.0e)\n", b, j.worst, kMmaBound);
    EXPECT_LE(j.worst, kMmaBound) << "entry " << b;
  }
}

// y of B = 3 x on one rows x cols matrix by kernels v.
std::vector<float> run_variant(cuda::GemvKernel v, GgmlType t, const cuda::DeviceBuffer& d_w, const cuda::DeviceBuffer& d_x, int64_t rows,
                               int64_t cols) {
  cuda::DeviceBuffer d_y((size_t)3 * rows * 4);
  cuda::gemv(t, d_w.get(), rows, cols, d_x.as<float>(), d_y.as<float>(), 3, 0, cols, rows, v);
  return cuda::to_host<float>(d_y, (size_t)3 * rows);
}

void default_dispatch_case(GgmlType t, int64_t rows, int64_t cols, bool want_mma) {
  MLACONF_REQUIRE_CUDA();
  ASSERT_EQ(cuda::gemv_mma_by_default(t, rows, cols), want_mma) << "the rule moved: update this case's expectation";
  const auto blocks = random_blocks(t, rows * cols / 256, 808 + rows + cols + (int)t);
  auto d_w = cuda::to_device(blocks), d_x = cuda::to_device(random_x((size_t)3 * cols, 23));
  const auto def = run_variant(cuda::GemvKernel::Default, t, d_w, d_x, rows, cols);
  const auto mma = run_variant(cuda::GemvKernel::Mma, t, d_w, d_x, rows, cols);
  const auto simt = run_variant(cuda::GemvKernel::Simt, t, d_w, d_x, rows, cols);
  const size_t bytes = def.size() * 4;
  EXPECT_NE(std::memcmp(mma.data(), simt.data(), bytes), 0) << "the two kernels agree bit for bit: no evidence either way";
  EXPECT_EQ(std::memcmp(def.data(), (want_mma ? mma : simt).data(), bytes), 0)
      << "the default did not run the " << (want_mma ? "tensor-core" : "SIMT") << " kernel";
}

// The CTA shape by balance (gemv_mma_cta): where the grid takes several rounds, a matrix moves from CTAs of 8 warps to
// CTAs of 4 with the same split of K (want_ks: the order of sums), judged against float64 and each entry alone under
// that shape (gemv_batch_check); where it moves nothing (the rule depends on the SM count; these shapes move on the
// H200's 132) the case skips, saying so. The shape's bits equal the unbalanced one's by construction (a row's order
// of sums depends on ks alone), which the comparison of both shapes in one process showed on the H200.
void balanced_grid_case(GgmlType t, int64_t rows, int64_t cols, int B, int want_ks) {
  MLACONF_REQUIRE_CUDA();
  const cuda::MmaCta cta = cuda::gemv_mma_cta(rows, cols, B, true, false);  // B x on one matrix
  ASSERT_EQ(cta.ks, want_ks) << "the split of K moved: update this case";
  if (cta.rt * cta.ks == 8) GTEST_SKIP() << "skipped: on this device's SM count the balance keeps CTAs of 8 warps";
  ASSERT_EQ(cta.rt * cta.ks, 4);
  gemv_batch_check(kMma, t, rows, cols, B, 3100 + rows + cols + (int)t, 43 + B, no_emulation(), kMmaBound);
}

// The chained x split (one matrix, no expert ids): a single matrix's split is a programmatic dependent of the kernel
// before it, which triggers at its start, so the split must wait for it before reading x. Here that kernel is
// an rmsnorm over 4096 + B rows whose last B rows (its last CTAs) are x, the buffer filled with NaN first: a
// split that read x early would read NaN. Chained, by direct launches or a graph's replays (memset, rmsnorm
// and GEMV captured together), the bits are those of the GEMV launched after the rmsnorm has finished (the
// device synchronized between them), which the other cases judge against float64.
void chained_case(GgmlType t, int64_t rows, int64_t cols, int B, bool graph) {
  MLACONF_REQUIRE_CUDA();
  const int64_t lead = 4096, n = lead + B;
  auto d_w = cuda::to_device(random_blocks(t, rows * cols / 256, 611 + rows + cols + (int)t));
  auto d_src = cuda::to_device(random_x((size_t)(n * cols), 47 + B)), d_nw = cuda::to_device(random_x((size_t)cols, 5));
  cuda::DeviceBuffer d_norm((size_t)(n * cols * 4)), d_y((size_t)B * rows * 4);
  const float* x = d_norm.as<float>() + lead * cols;
  auto queue = [&](bool wait_between) {
    d_norm.fill(0xFF);
    d_y.fill(0xFF);
    cuda::rmsnorm(d_src.as<float>(), d_nw.as<float>(), n, cols, cols, 1e-5f, d_norm.as<float>());
    if (wait_between) cuda::synchronize();
    cuda::gemv(t, d_w.get(), rows, cols, x, d_y.as<float>(), B, 0, cols, rows, kMma);
  };
  auto result = [&] {
    cuda::synchronize();
    return cuda::to_host<float>(d_y, (size_t)B * rows);
  };
  queue(true);
  const std::vector<float> want = result();
  ASSERT_TRUE(std::all_of(want.begin(), want.end(), [](float v) { return std::isfinite(v); })) << "the GEMV after the rmsnorm gave non-finite y";
  if (!graph) {
    for (int rep = 0; rep < 3; ++rep) {
      queue(false);
      const std::vector<float> y = result();
      EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0) << "run " << rep << ": the chained split changed the bits";
    }
    return;
  }
  cuda::CudaGraph g;
  g.capture([&] { queue(false); });
  for (int rep = 0; rep < 3; ++rep) {
    g.launch();
    const std::vector<float> y = result();
    EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0) << "replay " << rep << ": the chained split changed the bits";
  }
}

const bool registered = [] {
  const GgmlType kTypes[] = {GgmlType::Q4_K, GgmlType::Q6_K};
  const int64_t kRows[] = {1, 15, 17, 33, 257};
  const int64_t kBlocks[] = {1, 2, 11, 24};
  const int kBatches[] = {1, 2, 3, 8, 17};
  for (GgmlType t : kTypes) {
    const std::string tn = type_name(t);
    int k = 0;
    for (int64_t rows : kRows)
      for (int64_t nb : kBlocks) {
        const int B = kBatches[k++ % 5];
        register_case("gemv_mma",
                      "gemv(type=" + tn + ",rows=" + std::to_string(rows) + ",cols=" + std::to_string(nb * 256) + ",b=" +
                          std::to_string(B) + ")",
                      [=] { batch_case(t, rows, nb * 256, B); });
      }
    for (int64_t rows : {2065, 4225, 8449, 16897})  // 1 (K over 8 warps), 2, 4, 8 row tiles per CTA
      register_case("gemv_mma", "gemv(type=" + tn + ",rows=" + std::to_string(rows) + ",cols=512,b=3)",
                    [=] { batch_case(t, rows, 512, 3); });
    // Production shapes: an expert's gate/up (2048 x 6144) and down (6144 x 2048).
    register_case("gemv_mma", "gemv(type=" + tn + ",rows=2048,cols=6144,b=8)", [=] { batch_case(t, 2048, 6144, 8); });
    register_case("gemv_mma", "gemv(type=" + tn + ",rows=6144,cols=2048,b=1)", [=] { batch_case(t, 6144, 2048, 1); });
    register_case("gemv_mma", "experts(type=" + tn + ",rows=77,cols=2816,ids=2.0.2.3.1.2)",
                  [=] { experts_case(t, 77, 2816, {2, 0, 2, 3, 1, 2}); });
    // 11 entries on expert 1, interleaved with others.
    register_case("gemv_mma", "experts(type=" + tn + ",rows=40,cols=512,ids=1.1.0.1.1.1.1.1.2.1.1.1.1.3)",
                  [=] { experts_case(t, 40, 512, {1, 1, 0, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 3}); });
    // Experts by id against each matrix alone, bit for bit: up to 128 row tiles the experts split K over 4 warps
    // and one matrix over 8, in the same order of sums (8 chunks added in pairs). Blocks per row 6 (empty
    // chunks), 1 (one chunk of 8 non-empty), 9 (uneven chunks), 24 (the gate/up, 3 per chunk); the down
    // (6144 x 2048, beyond 128 tiles).
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{132, 1536}, {40, 256}, {2000, 2304}, {2048, 6144}, {6144, 2048}})
      register_case("gemv_mma", "experts_one_x(type=" + tn + ",rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols) + ")",
                    [=] { experts_shared_x_case(t, rows, cols); });
    // 20 entries, 6 on expert 1, interleaved with others.
    register_case("gemv_mma", "experts(type=" + tn + ",rows=40,cols=512,ids=1.0.1.2.3.1.0.2.1.3.3.2.0.1.2.0.3.1.2.0)",
                  [=] { experts_case(t, 40, 512, {1, 0, 1, 2, 3, 1, 0, 2, 1, 3, 3, 2, 0, 1, 2, 0, 3, 1, 2, 0}); });
    // The shared expert as id -1: the pipeline's one-token step at an expert's gate (2048 x 6144) and down
    // (6144 x 2048, beyond 128 tiles), 8 + 1 entries on one x; and 18 + 2 entries, one x each.
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{2048, 6144}, {6144, 2048}})
      register_case("gemv_mma", "experts_alt(type=" + tn + ",rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols) +
                                    ",ids=3.0.2.1.3.2.0.1.m1,one_x)",
                    [=] { experts_alt_case(t, rows, cols, {3, 0, 2, 1, 3, 2, 0, 1, -1}, true); });
    register_case("gemv_mma", "experts_alt(type=" + tn + ",rows=40,cols=512,ids=20_with_m1_at_5.19)", [=] {
      experts_alt_case(t, 40, 512, {1, 0, 2, 3, 0, -1, 2, 1, 3, 0, 2, 1, 3, 0, 1, 2, 3, 0, 1, -1}, false);
    });
    // Pairs grouped by expert: runs of 1-7 slots starting at odd and even slots (37 pairs on 6 experts, one unused),
    // and the production shapes with 64 pairs on 24 of 32 experts (gate / up; the down beyond 128 tiles).
    const std::vector<int32_t> ids37 = {4, 1, 0, 4, 2, 4, 1, 0, 0, 4, 2, 1, 4, 0, 2, 4, 4, 1, 0, 2, 1, 0, 5, 2, 1, 0, 4, 2, 2, 1, 0, 5, 0, 2, 1, 2, 0};
    std::vector<int32_t> ids64(64);
    for (int j = 0; j < 64; ++j) ids64[j] = (int32_t)((j * 7 + j / 5) % 24);
    register_case("gemv_mma", "experts_grouped(type=" + tn + ",rows=40,cols=512,pairs=37,experts=6)",
                  [=] { experts_grouped_case(t, 40, 512, ids37, 6); });
    register_case("gemv_mma", "experts_grouped(type=" + tn + ",rows=2048,cols=6144,pairs=64,experts=32)",
                  [=] { experts_grouped_case(t, 2048, 6144, ids64, 32); });
    // x through shared memory (CTAs of 2 row tiles beyond 128 tiles: the down, and 4228 rows: the last CTA's first
    // tile has 4 rows and its second none, each K part one block; 4228 keeps a Q6_K expert 16-byte aligned).
    register_case("gemv_mma", "experts_grouped(type=" + tn + ",rows=4228,cols=512,pairs=37,experts=6,xsmem=1)",
                  [=] { experts_grouped_case(t, 4228, 512, ids37, 6, true); });
    register_case("gemv_mma", "experts_grouped(type=" + tn + ",rows=6144,cols=2048,pairs=64,experts=32,xsmem=1)",
                  [=] { experts_grouped_case(t, 6144, 2048, ids64, 32, true); });
    // Grids of several rounds, CTAs of 8 warps -> 4: a head of 9680 tiles (K in one warp) at 1 and 3 x and, with
    // 8 blocks per row, at 9 x (one pass of 8 column groups in CTAs of 4 warps), attn_output's 384 tiles (K over 4
    // warps) and GLM-5's dense gate (768 tiles, K over 2) at 17 x (3 passes of the matrix).
    for (const auto& [rows, cols, ks, B] : {std::tuple<int64_t, int64_t, int, int>{154880, 512, 1, 1}, {154880, 512, 1, 3},
                                            {154880, 2048, 1, 9}, {6144, 4096, 4, 17}, {12288, 2048, 2, 17}})
      register_case("gemv_mma", "balanced_grid(type=" + tn + ",rows=" + std::to_string(rows) + ",cols=" +
                                    std::to_string(cols) + ",b=" + std::to_string(B) + ")",
                    [=] { balanced_grid_case(t, rows, cols, B, ks); });
    // Chained splits: one matrix of 8-warp CTAs at one x (q_a's shape), 1040 x 2048 at 3 x and at 17 x (4 column
    // groups), and a grid of several rounds (9680 tiles), directly and in graphs.
    for (const auto& [rows, cols, B] : {std::tuple<int64_t, int64_t, int>{2048, 6144, 1}, {1040, 2048, 3}, {1040, 2048, 17}, {154880, 512, 1}})
      for (bool graph : {false, true})
        register_case("gemv_mma", "chained(type=" + tn + ",rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols) +
                                      ",b=" + std::to_string(B) + (graph ? ",graph" : "") + ")",
                      [=] { chained_case(t, rows, cols, B, graph); });
    register_case("gemv_mma", "negative_control(type=" + tn + ",fault=gemv_x_bf16)", [=] { negative_control_case(t); });
    register_case("gemv_mma", "x_range(type=" + tn + ",log2_scale=m100.m30.40.100.pm60)", [=] { x_range_case(t); });
    register_case("gemv_mma", "gemv(type=" + tn + ",rows=1040,cols=2048,b=64)", [=] { batch_case(t, 1040, 2048, 64); });
    // One pass of a shared matrix takes up to 4 column groups of 4 x (16 x) from 33 x on where a warp streams at
    // least 8 blocks (1040 x 16384: K over 8 warps, 8 blocks each; 16897 x 2048: 8 row tiles per CTA, 8 blocks
    // each), else 2 (8 x): 5, 12, 16 and 20 x in 1-3 passes of 8 x (the last partial), 33 in passes of 16, 16 and 1 x.
    for (const auto& [rows, cols, B] : {std::tuple<int64_t, int64_t, int>{1040, 16384, 5}, {1040, 16384, 12}, {1040, 16384, 16},
                                        {1040, 16384, 33}, {16897, 2048, 20}}) {
      const std::string shape = "rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols) + ",b=" + std::to_string(B) + ")";
      register_case("gemv_mma", "gemv(type=" + tn + "," + shape, [=] { batch_case(t, rows, cols, B); });
    }
    // x through shared memory (K not split: at least 1056 row tiles, CTAs of 8; more than 8 x): 16897 rows (the last
    // CTA's warps 1-7 have no rows but copy x) at 9 x (3 column groups, the last with one x, and one of padding),
    // 12 (3 groups), 16, 33 (three passes, the last with 1 x); the head's 154880 rows at 9 x with 2 blocks per row.
    for (const auto& [rows, cols, B] : {std::tuple<int64_t, int64_t, int>{16897, 2048, 9}, {16897, 2048, 12}, {16897, 2048, 16},
                                        {16897, 2048, 33}, {154880, 512, 9}}) {
      const std::string shape = "rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols) + ",b=" + std::to_string(B) + ")";
      register_case("gemv_mma", "gemv(type=" + tn + "," + shape, [=] {
        EXPECT_TRUE(cuda::gemv_mma_cta(rows, cols, B, true, false).xs) << "the case must take the path it names";
        batch_case(t, rows, cols, B);
      });
    }
    // x staged per warp at one x (Q4_K: a pass of one live slot): one row tile (1 block: 7 of the 8 warps without
    // blocks), q_a's 2048 x 6144 (K over 8 warps), 4225 rows (2 tiles per CTA, the last CTA's second tile empty),
    // 16897 x 2048 (8 tiles per CTA, K in one warp) and the head's 154880 rows (CTAs of 4 by balance); at 2 x a shared
    // pass of two slots (not staged). The experts by id: 9 entries on one x with id -1 (the one-token step), 6 entries
    // of their own x (slots 0-5: columns of two column groups), 136 x 2304 (9 row tiles, the last with 8 rows; 9
    // blocks per row: uneven chunks of 1-2 blocks) and 40 x 256 (one block: 7 of the 8 chunks empty).
    if (t == GgmlType::Q4_K) {
      for (const auto& [rows, cols, B] : {std::tuple<int64_t, int64_t, int>{17, 256, 1}, {2048, 6144, 1}, {4225, 512, 1},
                                          {16897, 2048, 1}, {154880, 512, 1}, {2048, 6144, 2}})
        register_case("gemv_mma", "xwarp(type=" + tn + ",rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols) +
                                      ",b=" + std::to_string(B) + ")",
                      [=] {
                        EXPECT_EQ(cuda::gemv_mma_xwarp_pass(t, B, true, false), B == 1) << "the case must take the path it names";
                        batch_case(t, rows, cols, B);
                      });
      for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{2048, 6144}, {6144, 2048}, {136, 2304}})
        register_case("gemv_mma", "experts_xwarp(type=" + tn + ",rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols) +
                                      ",ids=3.0.2.1.3.2.0.1.m1,one_x)",
                      [=] { experts_alt_case(t, rows, cols, {3, 0, 2, 1, 3, 2, 0, 1, -1}, true); });
      for (const int64_t cols : {512, 256})
        register_case("gemv_mma", "experts_xwarp(type=" + tn + ",rows=40,cols=" + std::to_string(cols) + ",ids=1.m1.2.3.0.2)",
                      [=] { experts_alt_case(t, 40, cols, {1, -1, 2, 3, 0, 2}, false); });
    }
    for (const auto& [rows, cols, want] : {std::tuple<int64_t, int64_t, bool>{1024, 2048, true}, {1023, 2048, false},
                                           {1024, 1792, false}})
      register_case("gemv_mma", "default_dispatch(type=" + tn + ",rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols) + ")",
                    [=] { default_dispatch_case(t, rows, cols, want); });
  }
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
