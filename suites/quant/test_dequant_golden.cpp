// suites/quant: reference/dequant against ggml's own dequantization (../shared/golden/ggml-dequant.h5),
// bit for bit, for every type group the file holds; plus negative controls that must fail it.
//
// Each group holds `blocks` (uint8 [64, type_size * values_per_row / block_size]: raw ggml blocks from
// ggml_quantize_chunk) and `dequant` (float32 [64, values_per_row]: ggml's to_float of them).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/ggml_types.h"
#include "reference/dequant/dequant.h"
#include "suites/quant/float_compare.h"
#include "suites/quant/h5_read.h"
#include "suites/quant/register_case.h"

namespace mlaconf::test {
namespace {

const std::string kGolden = shared_path("golden/ggml-dequant.h5");

struct GoldenGroup {
  GgmlType type;
  std::vector<uint8_t> blocks;
  std::vector<float> dequant;
};

GoldenGroup load_group(const std::string& group) {
  H5Handle f = h5_open(kGolden);
  const int64_t id = h5_int_attr(f.get(), "/" + group, "ggml_type");
  const TypeTraits* tt = find_type(static_cast<uint32_t>(id));
  if (!tt) throw std::runtime_error(group + ": unknown ggml_type " + std::to_string(id));
  if (std::string(tt->name) != group) throw std::runtime_error(group + ": ggml_type attribute says " + tt->name);
  GoldenGroup g{tt->type, h5_read<uint8_t>(f.get(), "/" + group + "/blocks"),
                h5_read<float>(f.get(), "/" + group + "/dequant")};
  if (static_cast<int64_t>(g.blocks.size()) != static_cast<int64_t>(g.dequant.size()) / tt->block_size * tt->type_size)
    throw std::runtime_error(group + ": blocks and dequant sizes disagree with the type's block layout");
  return g;
}

// Dequantizes the group's blocks (optionally transformed first) and compares with ggml's output.
BitCompare run_group(const GoldenGroup& g, const std::vector<uint8_t>& blocks) {
  std::vector<float> out(g.dequant.size(), -1.0f);
  ref::dequantize(g.type, blocks.data(), out.data(), static_cast<int64_t>(out.size()));
  return compare_bits(out.data(), g.dequant.data(), static_cast<int64_t>(out.size()));
}

void golden_case(const std::string& group) {
  const GoldenGroup g = load_group(group);
  // Never test on zeros: the golden data must carry signal.
  int64_t nonzero = 0;
  for (float v : g.dequant) nonzero += v != 0.0f;
  ASSERT_GT(nonzero, static_cast<int64_t>(g.dequant.size()) / 2) << group << ": golden output is mostly zero";
  const BitCompare r = run_group(g, g.blocks);
  EXPECT_TRUE(r.exact()) << group << ": " << r.mismatches << " of " << r.n
                         << " values differ from ggml (tolerance: 0 bits; max " << r.max_ulps << " ulps):" << r.first;
}

// Negative controls: realistic unpacking bugs, emulated by transforming the raw bytes the (correct)
// dequantizer sees. Each must be caught by the bit-exact comparison.
std::vector<uint8_t> q4k_swap_nibbles(std::vector<uint8_t> b) {
  // Reading the high nibble for the first 32 values of each chunk and the low for the second.
  for (size_t blk = 0; blk < b.size() / 144; ++blk)
    for (size_t k = 16; k < 144; ++k) {
      uint8_t& q = b[blk * 144 + k];
      q = static_cast<uint8_t>((q >> 4) | (q << 4));
    }
  return b;
}

std::vector<uint8_t> q4k_scale_one_ulp(std::vector<uint8_t> b) {
  // An f16 -> f32 conversion that is off by one half-ulp step in d.
  for (size_t blk = 0; blk < b.size() / 144; ++blk) b[blk * 144] ^= 1;
  return b;
}

std::vector<uint8_t> q6k_scales_unsigned(std::vector<uint8_t> b) {
  // Treating the int8 sub-block scales as unsigned would flip negative ones: emulate by negating them.
  for (size_t blk = 0; blk < b.size() / 210; ++blk)
    for (size_t k = 192; k < 208; ++k) b[blk * 210 + k] = static_cast<uint8_t>(-static_cast<int8_t>(b[blk * 210 + k]));
  return b;
}

void negative_case(const std::string& group, std::vector<uint8_t> (*breaker)(std::vector<uint8_t>)) {
  const GoldenGroup g = load_group(group);
  const BitCompare r = run_group(g, breaker(g.blocks));
  EXPECT_GT(r.mismatches, r.n / 4) << group << ": the broken variant was not caught (" << r.mismatches << " of "
                                   << r.n << " differ)";
}

bool register_all() {
  if (!std::filesystem::exists(kGolden)) {
    register_case("quant", "dequant_golden(file=missing)",
                  [] { GTEST_SKIP() << "skipped: " << kGolden << " not found (../shared absent)"; });
    return true;
  }
  std::vector<std::string> groups;
  try {
    H5Handle f = h5_open(kGolden);
    groups = h5_root_groups(f.get());
  } catch (const std::exception& e) {
    register_case("quant", "dequant_golden(file=unreadable)", [msg = std::string(e.what())] { FAIL() << msg; });
    return true;
  }
  for (const std::string& g : groups) register_case("quant", "dequant_golden(type=" + g + ")", [g] { golden_case(g); });
  struct Neg {
    const char* group;
    const char* name;
    std::vector<uint8_t> (*fn)(std::vector<uint8_t>);
  };
  for (const Neg& n : {Neg{"Q4_K", "nibble_swap", q4k_swap_nibbles}, Neg{"Q4_K", "scale_one_ulp", q4k_scale_one_ulp},
                       Neg{"Q6_K", "scales_negated", q6k_scales_unsigned}})
    register_case("quant", std::string("dequant_golden_negative(type=") + n.group + ",break=" + n.name + ")",
                  [n] { negative_case(n.group, n.fn); });
  return true;
}

const bool registered = register_all();

}  // namespace
}  // namespace mlaconf::test
