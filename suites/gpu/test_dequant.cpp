// suites/gpu: dequantization. The CUDA formulas (their host twin, on the CPU everywhere) and the kernels
// against the reference dequantizer, bit for bit; the fp16 output against the fp16 rounding of the
// reference's values. Blocks come from suites/quant's generator (random bytes, sane f16 scales).
//
// The kernel runs one thread per value in CTAs of 256 threads, grid-stride beyond 65535 x 8 CTAs:
// off-alignment cases take value counts just below and above multiples of 256 (block counts of 32-value
// types around multiples of 8, 1-value types around 256) and one count past the grid's stride.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "core/ggml_types.h"
#include "optimized/api.h"
#include "reference/dequant/dequant.h"
#include "suites/gpu/gpu_test_util.h"
#include "suites/gpu/host_ref.h"
#include "suites/gpu/op_check.h"

namespace mlaconf::gputest {
namespace {

using test::CaseName;
constexpr int64_t kBlocks = 512;

std::vector<int32_t> as_i32(const std::vector<uint16_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

void formula_case(GgmlType t) {
  const int64_t n = kBlocks * traits(t).block_size;
  const auto blocks = random_blocks(t, kBlocks, 1000 + (uint32_t)t);
  std::vector<float> mine(n);
  cuda::dequantize_host(t, blocks.data(), n, mine.data());
  const std::vector<float> want = ref_dequant(t, blocks, n);
  OpCheck chk;
  chk.input("blocks", [&] { return u8_array({kBlocks, (int64_t)traits(t).type_size}, blocks); });
  chk.bits("y", {n}, want, mine);
  size_t nonzero = 0;
  for (float v : mine) nonzero += v != 0;
  EXPECT_GT(nonzero, (size_t)n / 2) << "test data must not be (mostly) zeros";
  expect_pass(chk);
}

// n_blocks random blocks through dequantize_f32 or dequantize_f16.
void gpu_case(GgmlType t, int64_t n_blocks, bool f16) {
  MLACONF_REQUIRE_CUDA();
  const int64_t n = n_blocks * traits(t).block_size;
  const auto blocks = random_blocks(t, n_blocks, 1000 + (uint32_t)t + (uint32_t)n_blocks);
  const std::vector<float> want = ref_dequant(t, blocks, n);
  auto d_src = cuda::to_device(blocks);
  OpCheck chk;
  chk.input("blocks", [&] { return u8_array({n_blocks, (int64_t)traits(t).type_size}, blocks); });
  if (!f16) {
    cuda::DeviceBuffer d_out(n * 4);
    cuda::dequantize_f32(t, d_src.get(), n, d_out.as<float>());
    cuda::synchronize();
    chk.bits("y_f32", {n}, want, cuda::to_host<float>(d_out, n));
  } else {
    cuda::DeviceBuffer d_out(n * 2);
    cuda::dequantize_f16(t, d_src.get(), n, d_out.as<uint16_t>());
    cuda::synchronize();
    std::vector<uint16_t> want16(n);
    for (int64_t i = 0; i < n; ++i) want16[i] = cuda::float_to_half_bits(want[i]);
    chk.exact("y_f16_bits", {n}, as_i32(want16), as_i32(cuda::to_host<uint16_t>(d_out, n)));
  }
  expect_pass(chk);
}

// Negative control: one flipped byte in the blocks the GPU reads must be caught by the comparison.
void negative_control_case() {
  MLACONF_REQUIRE_CUDA();
  const GgmlType t = GgmlType::Q4_K;
  auto blocks = random_blocks(t, kBlocks, 7);
  const int64_t n = kBlocks * 256;
  const std::vector<float> want = ref_dequant(t, blocks, n);
  blocks[144 * 3 + 20] ^= 0x10;  // a quant nibble of block 3
  auto d_src = cuda::to_device(blocks);
  cuda::DeviceBuffer d_out(n * 4);
  cuda::dequantize_f32(t, d_src.get(), n, d_out.as<float>());
  cuda::synchronize();
  OpCheck chk(testing::TempDir() + "/mlaconf_repro_dequant");
  chk.bits("y_f32", {n}, want, cuda::to_host<float>(d_out, n));
  std::printf("%s", chk.summary().c_str());
  EXPECT_FALSE(chk.pass()) << "the check must catch a corrupted block";
}

void bad_input_case() {
  // Argument checks run before any device work, so this runs without a GPU too.
  EXPECT_THROW(cuda::dequantize_host(GgmlType::Q4_K, nullptr, 100, nullptr), InputError);
  EXPECT_THROW(cuda::dequantize_host(GgmlType::Q8_K, nullptr, 256, nullptr), InputError);
  EXPECT_THROW(cuda::dequantize_host(GgmlType::TQ1_0, nullptr, 256, nullptr), InputError);
}

const bool registered = [] {
  const auto name = [](const char* op, GgmlType t, int64_t blocks, const char* out) {
    CaseName n(op);
    n.p("type", type_name(t)).p("blocks", blocks);
    if (out) n.p("out", out);
    return n.str();
  };
  for (GgmlType t : weight_types()) {
    register_case("dequant_formula", name("dequant_formula", t, kBlocks, nullptr), [t] { formula_case(t); });
    register_case("dequant_gpu", name("dequant_gpu", t, kBlocks, "f32"), [t] { gpu_case(t, kBlocks, false); });
    register_case("dequant_gpu", name("dequant_gpu", t, kBlocks, "f16"), [t] { gpu_case(t, kBlocks, true); });
  }
  // Off alignment: value counts around multiples of the 256-thread CTA, per block size.
  for (int64_t nb : {1, 7, 9, 15, 17, 509})
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::IQ4_NL, GgmlType::Q4_K, GgmlType::IQ2_XXS}) {
      if (traits(t).block_size == 256 && nb > 17) continue;
      register_case("dequant_gpu", name("dequant_gpu", t, nb, "f32"), [t, nb] { gpu_case(t, nb, false); });
      register_case("dequant_gpu", name("dequant_gpu", t, nb, "f16"), [t, nb] { gpu_case(t, nb, true); });
    }
  for (int64_t n : {1, 255, 257, 4099})
    for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::F32})
      register_case("dequant_gpu", name("dequant_gpu", t, n, "f32"), [t, n] { gpu_case(t, n, false); });
  // Past the grid's stride (65535 x 8 CTAs of 256 threads): the grid-stride loop's second pass (Q4_0: the
  // fewest bytes per value of the 32-value types, so the host's share stays a few seconds).
  const int64_t past_grid = 65535LL * 8 * 256 / 32 + 3;
  register_case("dequant_gpu", name("dequant_gpu", GgmlType::Q4_0, past_grid, "f32"), [past_grid] { gpu_case(GgmlType::Q4_0, past_grid, false); });
  register_case("dequant_gpu", "dequant_negative_control(type=Q4_K,corrupt=1byte)", negative_control_case);
  register_case("dequant_formula", "dequant_bad_input(n=100,types=Q4_K|Q8_K|TQ1_0)", bad_input_case);
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
