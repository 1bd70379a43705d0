// suites/gpu: dequantization. The CUDA formulas against the reference dequantizer (or, for a type it
// does not cover yet, gguf-py's numpy dequantizer), bit for bit; the fp16 output against the fp16
// rounding of the fp32 values.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>

#include "core/error.h"
#include "core/ggml_types.h"
#include "optimized/api.h"
#include "suites/gpu/gpu_test_util.h"
#ifdef MLACONF_HAVE_REF_DEQUANT
#include "reference/dequant/dequant.h"
#endif

namespace mlaconf::gputest {

// Byte offsets of the f16 scale fields per block (patched to sane values so no block is inf/NaN).
static std::vector<int> f16_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    case GgmlType::Q6_K: return {208};
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
    case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S: case GgmlType::IQ3_XXS: case GgmlType::IQ3_S:
    case GgmlType::IQ1_S: return {0};
    default: return {};
  }
}

// n_blocks random blocks of type t (never all zeros), with finite, realistic scales.
std::vector<uint8_t> random_blocks(GgmlType t, int64_t n_blocks, uint64_t seed) {
  const int64_t kBlocks = n_blocks;
  const auto& tr = traits(t);
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> b(kBlocks * tr.type_size);
  for (auto& x : b) x = (uint8_t)rng();
  std::uniform_real_distribution<float> mag(1.0f / 256, 2.0f);
  for (int64_t k = 0; k < kBlocks; ++k) {
    uint8_t* blk = b.data() + k * tr.type_size;
    for (int off : f16_fields(t)) {
      float v = mag(rng) * ((rng() & 1) ? -1.f : 1.f);
      uint16_t h = cuda::float_to_half_bits(v);
      blk[off] = h & 255;
      blk[off + 1] = h >> 8;
    }
    if (t == GgmlType::IQ1_M) {  // the f16 scale lives in the top nibble of the four u16 scale words
      uint16_t h = cuda::float_to_half_bits(mag(rng));
      for (int w = 0; w < 4; ++w) blk[48 + 2 * w + 1] = (blk[48 + 2 * w + 1] & 0x0f) | (((h >> (4 * w)) & 15) << 4);
    }
    if (t == GgmlType::MXFP4) blk[0] = (uint8_t)(110 + rng() % 30);
    if (t == GgmlType::F32) {  // finite floats, plus a few specials in the first values
      float v = mag(rng) * ((rng() & 1) ? -1.f : 1.f);
      std::memcpy(blk, &v, 4);
    }
  }
  if (t == GgmlType::F32) {
    const float specials[] = {INFINITY, -INFINITY, 1e-40f, -0.0f};
    std::memcpy(b.data(), specials, sizeof specials);
  }
  return b;
}

namespace {
constexpr int64_t kBlocks = 512;

// The independent dequantization: the reference's, else gguf-py's. nullopt (with why) if neither runs.
std::optional<std::vector<float>> independent(GgmlType t, const std::vector<uint8_t>& blocks, std::string* who) {
  const int64_t n = kBlocks * traits(t).block_size;
  std::vector<float> out(n);
#ifdef MLACONF_HAVE_REF_DEQUANT
  try {
    ref::dequantize(t, blocks.data(), out.data(), n);
    *who = "reference";
    return out;
  } catch (const InputError&) {
    // the reference does not cover this type (yet): fall through to gguf-py
  }
#endif
  const std::string dir = testing::TempDir();
  const std::string in = dir + "/mlaconf_gpu_deq_" + type_name(t) + ".bin", outp = in + ".f32";
  { std::ofstream(in, std::ios::binary).write((const char*)blocks.data(), blocks.size()); }
  const char* env_dir = std::getenv("MLACONF_GPU_SUITE_DIR");  // where the suite's sources are elsewhere (device copies)
  const std::string suite_dir = env_dir ? env_dir : MLACONF_GPU_SUITE_DIR;
  const std::string cmd = "python3 " + suite_dir + "/gguf_dequant.py " + type_name(t) + " " + in +
                          " " + outp + " 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    *who = "neither the reference nor gguf-py (python3 -m pip install gguf) can dequantize " + std::string(type_name(t));
    return std::nullopt;
  }
  std::ifstream f(outp, std::ios::binary);
  f.read((char*)out.data(), n * 4);
  if (f.gcount() != n * 4) {
    *who = "gguf-py returned a short output";
    return std::nullopt;
  }
  *who = "gguf-py";
  return out;
}

size_t first_bit_mismatch(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return i;
  return SIZE_MAX;
}

void formula_case(GgmlType t) {
  auto blocks = random_blocks(t, kBlocks, 1000 + (int)t);
  const int64_t n = kBlocks * traits(t).block_size;
  std::vector<float> mine(n);
  cuda::dequantize_host(t, blocks.data(), n, mine.data());
  std::string who;
  auto want = independent(t, blocks, &who);
  if (!want) GTEST_SKIP() << "not supported: " << who;
  size_t bad = first_bit_mismatch(mine, *want);
  EXPECT_EQ(bad, SIZE_MAX) << "vs " << who << ": value " << bad << " is " << mine[bad] << ", want " << (*want)[bad];
  size_t nonzero = 0;
  for (float v : mine) nonzero += v != 0;
  EXPECT_GT(nonzero, (size_t)n / 2) << "test data must not be (mostly) zeros";
}

void gpu_case(GgmlType t, bool f16) {
  MLACONF_REQUIRE_CUDA();
  auto blocks = random_blocks(t, kBlocks, 1000 + (int)t);
  const int64_t n = kBlocks * traits(t).block_size;
  std::vector<float> host(n);
  cuda::dequantize_host(t, blocks.data(), n, host.data());
  std::string who = "the host formulas";
  if (auto ind = independent(t, blocks, &who)) host = *ind;  // judge by the independent one where it runs
  auto d_src = cuda::to_device(blocks);
  if (!f16) {
    cuda::DeviceBuffer d_out(n * 4);
    cuda::dequantize_f32(t, d_src.get(), n, d_out.as<float>());
    cuda::synchronize();
    auto got = cuda::to_host<float>(d_out, n);
    size_t bad = first_bit_mismatch(got, host);
    EXPECT_EQ(bad, SIZE_MAX) << "vs " << who << ": value " << bad << " is " << got[bad] << ", want " << host[bad];
  } else {
    cuda::DeviceBuffer d_out(n * 2);
    cuda::dequantize_f16(t, d_src.get(), n, d_out.as<uint16_t>());
    cuda::synchronize();
    auto got = cuda::to_host<uint16_t>(d_out, n);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; ++i)
      if (got[i] != cuda::float_to_half_bits(host[i])) bad = i;
    EXPECT_EQ(bad, -1) << "fp16 value " << bad << " is not the fp16 rounding of " << host[bad];
  }
}

// Negative control: one flipped byte in the blocks the GPU reads must be caught by the comparison.
void negative_control_case() {
  MLACONF_REQUIRE_CUDA();
  const GgmlType t = GgmlType::Q4_K;
  auto blocks = random_blocks(t, kBlocks, 7);
  const int64_t n = kBlocks * 256;
  std::vector<float> want(n);
  cuda::dequantize_host(t, blocks.data(), n, want.data());
  blocks[144 * 3 + 20] ^= 0x10;  // a quant nibble of block 3
  auto d_src = cuda::to_device(blocks);
  cuda::DeviceBuffer d_out(n * 4);
  cuda::dequantize_f32(t, d_src.get(), n, d_out.as<float>());
  cuda::synchronize();
  EXPECT_NE(first_bit_mismatch(cuda::to_host<float>(d_out, n), want), SIZE_MAX) << "the check must catch a corrupted block";
}

void bad_input_case() {
  // Argument checks run before any device work, so this runs without a GPU too.
  EXPECT_THROW(cuda::dequantize_host(GgmlType::Q4_K, nullptr, 100, nullptr), InputError);
  EXPECT_THROW(cuda::dequantize_host(GgmlType::Q8_K, nullptr, 256, nullptr), InputError);
  EXPECT_THROW(cuda::dequantize_host(GgmlType::TQ1_0, nullptr, 256, nullptr), InputError);
}

const bool registered = [] {
  for (GgmlType t : weight_types()) {
    const std::string tn = type_name(t);
    register_case("dequant_formula", "dequant_formula(type=" + tn + ",blocks=512)", [t] { formula_case(t); });
    register_case("dequant_gpu", "dequant_gpu(type=" + tn + ",blocks=512,out=f32)", [t] { gpu_case(t, false); });
    register_case("dequant_gpu", "dequant_gpu(type=" + tn + ",blocks=512,out=f16)", [t] { gpu_case(t, true); });
  }
  register_case("dequant_gpu", "dequant_negative_control(type=Q4_K,corrupt=1byte)", negative_control_case);
  register_case("dequant_formula", "dequant_bad_input(n=100,types=Q4_K|Q8_K|TQ1_0)", bad_input_case);
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
