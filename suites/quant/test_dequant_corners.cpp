// suites/quant: hand-derived golden values for crafted blocks of the types ../shared/golden does not hold,
// a few corners no quantizer emits, and F16/BF16/F32 NaN, infinity and subnormal handling: maximum and
// minimum scales, all bits set, negative zero, f16 subnormal scales, and what infinite / NaN scales give.
//
// Every expected value below was worked out by hand from the format description (gguf-formats.md §2,
// ggml-common.h's grids) and is written as a literal or a one-line position rule, never by calling the
// code under test. Tolerance: 0 bits (+0 and -0 differ). Where NaN is expected, any NaN passes when it
// comes from arithmetic (0 * inf gives the platform's default NaN); F16/BF16/F32 NaN conversions must
// match bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/ggml_types.h"
#include "reference/dequant/dequant.h"
#include "suites/quant/float_compare.h"
#include "suites/quant/register_case.h"

namespace mlaconf::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// f16 bit patterns used as scales.
constexpr uint16_t kHalfMax = 0x7BFF;     // 65504
constexpr uint16_t kHalfMinNorm = 0x0400; // 2^-14
constexpr uint16_t kHalfMinSub = 0x0001;  // 2^-24
constexpr uint16_t kHalfOne = 0x3C00;     // 1.0
constexpr uint16_t kHalfMinusOne = 0xBC00;
constexpr uint16_t kHalfNegZero = 0x8000;
constexpr uint16_t kHalfInf = 0x7C00;
constexpr uint16_t kHalfNaN = 0x7E00;

struct Corner {
  GgmlType type;
  std::string name;
  std::vector<uint8_t> block;
  std::function<float(int)> expect;  // expected value of element v of the block
  bool exact_nan = false;            // a NaN expectation whose payload and sign must match too
};

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::vector<uint8_t> filled(GgmlType t, uint8_t byte) {
  return std::vector<uint8_t>(static_cast<size_t>(traits(t).type_size), byte);
}
void set16(std::vector<uint8_t>& b, int off, uint16_t v) {
  b[off] = static_cast<uint8_t>(v);
  b[off + 1] = static_cast<uint8_t>(v >> 8);
}
std::function<float(int)> all(float x) {
  return [x](int) { return x; };
}
// Values 0..15 of a 32-value block come from low nibbles, 16..31 from high nibbles.
std::function<float(int)> halves(float low, float high) {
  return [low, high](int v) { return v < 16 ? low : high; };
}
// K-quant traversal (Q2_K / Q3_K): value v belongs to 16-value group 8*(v/128) + 2*((v%128)/32) + (v%32)/16
// and sits at bit shift 2*((v%128)/32) of its q byte.
int kgroup(int v) { return 8 * (v / 128) + 2 * ((v % 128) / 32) + (v % 32) / 16; }
int kshift_step(int v) { return (v % 128) / 32; }

std::vector<Corner> corners() {
  using G = GgmlType;
  std::vector<Corner> c;
  auto add = [&](G t, std::string name, std::vector<uint8_t> b, std::function<float(int)> e) {
    c.push_back({t, std::move(name), std::move(b), std::move(e)});
  };

  // ---- F32 / F16 / BF16: one value per block; the ggml golden file has no NaN and few subnormals ----
  auto add_nan = [&](G t, std::string name, std::vector<uint8_t> b, uint32_t bits) {
    c.push_back({t, std::move(name), std::move(b), all(from_bits(bits)), true});
  };
  add(G::F16, "min_subnormal", {0x01, 0x00}, all(0x1p-24f));
  add(G::F16, "max_subnormal", {0xFF, 0x03}, all(1023.0f * 0x1p-24f));
  add(G::F16, "negative_zero", {0x00, 0x80}, all(-0.0f));
  add(G::F16, "negative_inf", {0x00, 0xFC}, all(-kInf));
  add_nan(G::F16, "quiet_nan", {0x00, 0x7E}, 0x7FC00000u);
  add_nan(G::F16, "signalling_nan_comes_out_quiet", {0x01, 0xFC}, 0xFFC02000u);  // sign and payload kept
  add(G::BF16, "min_subnormal", {0x01, 0x00}, all(0x1p-133f));
  add(G::BF16, "negative_zero", {0x00, 0x80}, all(-0.0f));
  add_nan(G::BF16, "signalling_nan_kept", {0x81, 0x7F}, 0x7F810000u);               // bits << 16, as ggml
  add_nan(G::F32, "signalling_nan_kept", {0x01, 0x00, 0x80, 0x7F}, 0x7F800001u);

  // ---- Q4_0: y = d * (nibble - 8) ----
  { auto b = filled(G::Q4_0, 0xFF); set16(b, 0, kHalfMax);
    add(G::Q4_0, "all_bits_max_scale", b, all(7.0f * 65504.0f)); }                     // 458528
  { auto b = filled(G::Q4_0, 0x00); set16(b, 0, kHalfMinNorm);
    add(G::Q4_0, "zero_nibbles_min_normal_scale", b, all(-0.00048828125f)); }          // -8 * 2^-14 = -2^-11
  { auto b = filled(G::Q4_0, 0x0F); set16(b, 0, kHalfMinSub);
    add(G::Q4_0, "subnormal_scale", b, halves(7.0f * 0x1p-24f, -0x1p-21f)); }          // 7*2^-24, -8*2^-24
  { auto b = filled(G::Q4_0, 0x08); set16(b, 0, kHalfNegZero);                         // low 8 -> q=0, high 0 -> q=-8
    add(G::Q4_0, "negative_zero_scale", b, halves(-0.0f, 0.0f)); }                     // 0*(-0) = -0; -8*(-0) = +0
  { auto b = filled(G::Q4_0, 0x08); set16(b, 0, kHalfInf);
    add(G::Q4_0, "inf_scale", b, halves(kNaN, -kInf)); }                               // 0*inf = NaN; -8*inf
  { auto b = filled(G::Q4_0, 0x5A); set16(b, 0, kHalfNaN);
    add(G::Q4_0, "nan_scale", b, all(kNaN)); }

  // ---- Q4_1: y = d * nibble + m ----
  { auto b = filled(G::Q4_1, 0xFF); set16(b, 0, kHalfMax); set16(b, 2, kHalfMax);
    add(G::Q4_1, "all_bits_max_scale", b, all(1048064.0f)); }                          // 15*65504 + 65504
  { auto b = filled(G::Q4_1, 0x00); set16(b, 0, kHalfOne); set16(b, 2, kHalfNegZero);
    add(G::Q4_1, "plus_zero_from_negative_min", b, all(0.0f)); }                       // (0*1) + (-0) = +0
  { auto b = filled(G::Q4_1, 0x00); set16(b, 0, kHalfNegZero); set16(b, 2, kHalfNegZero);
    add(G::Q4_1, "negative_zero", b, all(-0.0f)); }                                    // (0*-0) + (-0) = -0
  { auto b = filled(G::Q4_1, 0xF0); set16(b, 0, kHalfMinSub); set16(b, 2, 0x0200);    // m = 2^-15 (subnormal)
    add(G::Q4_1, "subnormal_scale_and_min", b, halves(0x1p-15f, 0x1p-15f + 15.0f * 0x1p-24f)); }

  // ---- Q5_0: y = d * ((nibble | bit<<4) - 16); bit of value j is qh bit j (u32 LE) ----
  { auto b = filled(G::Q5_0, 0xFF); set16(b, 0, kHalfMax);
    add(G::Q5_0, "all_bits_max_scale", b, all(15.0f * 65504.0f)); }                    // 982560
  { auto b = filled(G::Q5_0, 0x00); set16(b, 0, kHalfMinusOne);
    b[2] = 0x01; b[3] = 0x80; b[4] = 0x01; b[5] = 0x80;                                // qh bits 0, 15, 16, 31
    add(G::Q5_0, "high_bit_positions", b, [](int v) {
      return (v == 0 || v == 15 || v == 16 || v == 31) ? -0.0f : 16.0f; }); }          // (16-16)*-1 = -0; (0-16)*-1 = 16

  // ---- Q5_1: y = d * (nibble | bit<<4) + m ----
  { auto b = filled(G::Q5_1, 0xFF); set16(b, 0, kHalfMax); set16(b, 2, kHalfMinusOne);
    add(G::Q5_1, "all_bits_max_scale", b, all(31.0f * 65504.0f - 1.0f)); }            // 2030623
  { auto b = filled(G::Q5_1, 0x00); set16(b, 0, kHalfMinSub); set16(b, 2, kHalfNegZero);
    b[4] = 0xFF; b[5] = 0xFF;                                                          // qh bits 0..15 -> values 0..15
    add(G::Q5_1, "subnormal_scale_low_half_high_bit", b, halves(16.0f * 0x1p-24f, 0.0f)); }

  // ---- Q8_0: y = d * int8 (the quantizer never writes -128; the format allows it) ----
  { auto b = filled(G::Q8_0, 0x80); set16(b, 0, kHalfMax);
    add(G::Q8_0, "minus_128_max_scale", b, all(-128.0f * 65504.0f)); }                 // -8384512
  { auto b = filled(G::Q8_0, 0x7F); set16(b, 0, kHalfMinSub);
    add(G::Q8_0, "subnormal_scale", b, all(127.0f * 0x1p-24f)); }

  // ---- IQ4_NL: y = d * kvalues_iq4nl[nibble] ----
  { auto b = filled(G::IQ4_NL, 0xF0); set16(b, 0, kHalfMax);
    add(G::IQ4_NL, "extreme_codes_max_scale", b, halves(-127.0f * 65504.0f, 113.0f * 65504.0f)); }
  { auto b = filled(G::IQ4_NL, 0x78); set16(b, 0, kHalfNegZero);                       // codes 8 (1) and 7 (-10)
    add(G::IQ4_NL, "negative_zero_scale", b, halves(-0.0f, 0.0f)); }                   // -0*1 = -0; -0*-10 = +0

  // ---- MXFP4: y = 2^(e-128) * kvalues_fp4[nibble] ----
  { auto b = filled(G::MXFP4, 0x71); b[0] = 0;                                         // codes 1 (1) and 7 (12)
    add(G::MXFP4, "min_exponent_subnormal_scale", b, halves(0x1p-128f, 12.0f * 0x1p-128f)); }
  { auto b = filled(G::MXFP4, 0xF1); b[0] = 255;                                       // codes 1 and 15 (-12)
    add(G::MXFP4, "max_exponent", b, halves(0x1p127f, -kInf)); }                       // -12 * 2^127 overflows
  { auto b = filled(G::MXFP4, 0x80); b[0] = 127;                                       // codes 0 (+0) and 8 (E2M1 -0)
    add(G::MXFP4, "negative_zero_code", b, all(0.0f)); }                               // ggml's table maps -0 to 0

  // ---- Q2_K: per 16-value group g: y = d*(sc&15) * q - dmin*(sc>>4) ----
  { auto b = filled(G::Q2_K, 0xFF); set16(b, 80, kHalfMax); set16(b, 82, kHalfMax);
    add(G::Q2_K, "all_bits_max_scale", b, all(3.0f * 982560.0f - 982560.0f)); }        // 1965120
  { auto b = filled(G::Q2_K, 0x00); set16(b, 80, kHalfOne); set16(b, 82, kHalfOne);
    for (int k = 0; k < 16; ++k) b[k] = static_cast<uint8_t>(k | (1 << 4));            // scale k, min 1
    for (int k = 16; k < 80; ++k) b[k] = 0xE4;                                         // q = shift step (0,1,2,3)
    add(G::Q2_K, "scale_and_shift_positions", b, [](int v) {
      return static_cast<float>(kgroup(v) * kshift_step(v) - 1); }); }
  { auto b = filled(G::Q2_K, 0x00); set16(b, 80, kHalfNegZero); set16(b, 82, 0);
    add(G::Q2_K, "negative_zero", b, all(-0.0f)); }                                    // (-0*0)*0 - 0*0 = -0
  { auto b = filled(G::Q2_K, 0xFF); set16(b, 80, kHalfMinSub); set16(b, 82, 0);
    for (int k = 0; k < 16; ++k) b[k] = 0x0F;
    add(G::Q2_K, "subnormal_scale", b, all(45.0f * 0x1p-24f)); }                       // 2^-24 * 15 * 3
  { auto b = filled(G::Q2_K, 0x00); set16(b, 80, kHalfInf); set16(b, 82, 0);
    for (int k = 0; k < 16; ++k) b[k] = 0x01;
    add(G::Q2_K, "inf_scale", b, all(kNaN)); }                                         // inf * 0 = NaN

  // ---- Q3_K: y = d * (scale6 - 32) * (q2 - (hmask bit ? 0 : 4)) ----
  { auto b = filled(G::Q3_K, 0xFF); set16(b, 108, kHalfMax);
    add(G::Q3_K, "all_bits_max_scale", b, all(65504.0f * 31.0f * 3.0f)); }             // 6091872
  { auto b = filled(G::Q3_K, 0x00); set16(b, 108, kHalfOne);
    add(G::Q3_K, "all_zero_bits_min_scale", b, all(128.0f)); }                         // (-32) * (0-4)
  { auto b = filled(G::Q3_K, 0x00); set16(b, 108, kHalfOne);
    for (int l = 0; l < 32; ++l) b[l] = 0xFF;                                          // no -4 anywhere
    for (int l = 32; l < 96; ++l) b[l] = 0x55;                                         // q = 1 at every shift
    for (int k = 0; k < 8; ++k) b[96 + k] = static_cast<uint8_t>(k | ((k + 8) << 4));  // low 4 bits of scale j = j
    add(G::Q3_K, "scale_positions_low_bits", b, [](int v) { return static_cast<float>(kgroup(v) - 32); }); }
  { auto b = filled(G::Q3_K, 0x00); set16(b, 108, kHalfOne);
    for (int l = 0; l < 32; ++l) b[l] = 0xFF;
    for (int l = 32; l < 96; ++l) b[l] = 0x55;
    for (int k = 8; k < 12; ++k) b[96 + k] = 0xE4;                                     // high 2 bits of scale j = j/4
    add(G::Q3_K, "scale_positions_high_bits", b, [](int v) { return static_cast<float>(16 * (kgroup(v) / 4) - 32); }); }
  { auto b = filled(G::Q3_K, 0x00); set16(b, 108, kHalfOne);
    for (int l = 0; l < 32; ++l) b[l] = 0x0F;                                          // mask bits 0..3: first half only
    for (int k = 0; k < 8; ++k) b[96 + k] = 0x11;                                      // low 4 bits 1
    for (int k = 8; k < 12; ++k) b[96 + k] = 0xAA;                                     // high 2 bits 2: scale 33-32 = 1
    add(G::Q3_K, "hmask_bit_per_shift_step", b, [](int v) { return v < 128 ? 0.0f : -4.0f; }); }
  { auto b = filled(G::Q3_K, 0xFF); set16(b, 108, kHalfMinSub);
    add(G::Q3_K, "subnormal_scale", b, all(93.0f * 0x1p-24f)); }                       // 31 * 3 * 2^-24

  // ---- IQ2_XXS: db = d*(0.5+s)*0.25; y = db * grid byte * sign ----
  { auto b = filled(G::IQ2_XXS, 0x00); set16(b, 0, kHalfOne);
    add(G::IQ2_XXS, "all_zero_bits", b, all(1.0f)); }                                  // grid 0 = 8s; 8/8
  { auto b = filled(G::IQ2_XXS, 0xFF); set16(b, 0, kHalfOne);                          // grid 255, all signs, s=15
    add(G::IQ2_XXS, "all_bits", b, [](int v) {
      static const float g[8] = {8, 25, 8, 8, 25, 43, 43, 43};                         // 0x2b2b2b1908081908
      return -3.875f * g[v % 8]; }); }
  { auto b = filled(G::IQ2_XXS, 0x00); set16(b, 0, kHalfMinSub);
    add(G::IQ2_XXS, "subnormal_scale", b, all(0x1p-24f)); }                            // 2^-24 * 0.125 * 8
  { auto b = filled(G::IQ2_XXS, 0x00); set16(b, 0, kHalfNaN);
    add(G::IQ2_XXS, "nan_scale", b, all(kNaN)); }

  // ---- IQ2_XS: u16 = 9-bit grid index | 7 sign bits << 9; two 4-bit scales per 32 ----
  { auto b = filled(G::IQ2_XS, 0x00); set16(b, 0, kHalfOne);
    add(G::IQ2_XS, "all_zero_bits", b, all(1.0f)); }
  { auto b = filled(G::IQ2_XS, 0xFF); set16(b, 0, kHalfOne);                           // grid 511 = all 43
    add(G::IQ2_XS, "all_bits", b, all(-3.875f * 43.0f)); }                             // -166.625
  { auto b = filled(G::IQ2_XS, 0x00); set16(b, 0, kHalfOne);
    for (int k = 0; k < 8; ++k) b[66 + k] = 0xF0;                                      // low scale 0, high scale 15
    add(G::IQ2_XS, "scale_halves", b, [](int v) { return (v % 32) < 16 ? 1.0f : 31.0f; }); }  // 8*3.875

  // ---- IQ2_S: 10-bit grid index (qs | qh bits), explicit sign bytes ----
  { auto b = filled(G::IQ2_S, 0x00); set16(b, 0, kHalfOne);
    add(G::IQ2_S, "all_zero_bits", b, all(1.0f)); }
  { auto b = filled(G::IQ2_S, 0xFF); set16(b, 0, kHalfOne);                            // grid 1023 = all 43
    add(G::IQ2_S, "all_bits", b, all(-3.875f * 43.0f)); }
  { auto b = filled(G::IQ2_S, 0x00); set16(b, 0, kHalfOne);
    for (int k = 0; k < 32; ++k) b[34 + k] = 0x81;                                     // signs of values 0 and 7
    add(G::IQ2_S, "sign_bits", b, [](int v) { return (v % 8 == 0 || v % 8 == 7) ? -1.0f : 1.0f; }); }

  // ---- IQ3_XXS: db = d*(0.5+s)*0.5; two 4-value grid entries per 8 values ----
  { auto b = filled(G::IQ3_XXS, 0x00); set16(b, 0, kHalfOne);
    add(G::IQ3_XXS, "all_zero_bits", b, all(1.0f)); }                                  // grid 0 = 4s; 4/4
  { auto b = filled(G::IQ3_XXS, 0xFF); set16(b, 0, kHalfOne);                          // grid 255 = 0x3e341c04
    add(G::IQ3_XXS, "all_bits", b, [](int v) {
      static const float g[4] = {4, 28, 52, 62};
      return -7.75f * g[v % 4]; }); }

  // ---- IQ3_S: db = d*(1+2s); 9-bit grid index (qs | qh bit) ----
  { auto b = filled(G::IQ3_S, 0x00); set16(b, 0, kHalfOne);
    add(G::IQ3_S, "all_zero_bits", b, all(1.0f)); }                                   // grid 0 = 1s
  { auto b = filled(G::IQ3_S, 0xFF); set16(b, 0, kHalfOne);                            // grid 511 = 0x0f0f0101
    add(G::IQ3_S, "all_bits", b, [](int v) { return (v % 4) < 2 ? -31.0f : -465.0f; }); }
  { auto b = filled(G::IQ3_S, 0x00); set16(b, 0, kHalfMinSub);
    for (int k = 0; k < 4; ++k) b[106 + k] = 0xF0;                                     // scales 1 and 31 per 64
    add(G::IQ3_S, "subnormal_scale_halves", b, [](int v) { return (v % 64) < 32 ? 0x1p-24f : 31.0f * 0x1p-24f; }); }

  // ---- IQ1_S: dl = d*(2s+1); y = dl * (grid (-1/0/1) + delta) ----
  { auto b = filled(G::IQ1_S, 0x00); set16(b, 0, kHalfOne);
    add(G::IQ1_S, "all_zero_bits", b, all(-0.875f)); }                                 // grid 0 = all -1, +0.125
  { auto b = filled(G::IQ1_S, 0xFF); set16(b, 0, kHalfOne);                            // grid 2047 = all +1, s=7, -delta
    add(G::IQ1_S, "all_bits", b, all(15.0f * 0.875f)); }                               // 13.125
  { auto b = filled(G::IQ1_S, 0x00); set16(b, 0, kHalfNegZero);
    add(G::IQ1_S, "negative_zero_scale", b, all(0.0f)); }                              // -0 * -0.875 = +0

  // ---- IQ1_M: d is spread over the top nibbles of the 4 scale words (bytes 48..55) ----
  { auto b = filled(G::IQ1_M, 0x00);
    b[53] = 0xC0; b[55] = 0x30;                                                        // d = 0x3C00 = 1.0
    add(G::IQ1_M, "all_zero_bits", b, all(-0.875f)); }
  { auto b = filled(G::IQ1_M, 0xFF);
    set16(b, 48, 0x0FFF); set16(b, 50, 0x0FFF); set16(b, 52, 0xCFFF); set16(b, 54, 0x3FFF);
    add(G::IQ1_M, "all_bits_unit_scale", b, all(15.0f * 0.875f)); }                    // 13.125
  { auto b = filled(G::IQ1_M, 0x00);
    b[49] = 0x10;                                                                      // d = 0x0001 = 2^-24
    add(G::IQ1_M, "subnormal_scale", b, all(-0.875f * 0x1p-24f)); }

  return c;
}

void corner_case(const Corner& c) {
  const int64_t n = traits(c.type).block_size;
  std::vector<float> got(static_cast<size_t>(n), 12345.0f);
  ref::dequantize(c.type, c.block.data(), got.data(), n);
  int bad = 0;
  for (int v = 0; v < n; ++v) {
    const float want = c.expect(v);
    const bool ok = std::isnan(want) && !c.exact_nan ? std::isnan(got[v]) : float_bits(got[v]) == float_bits(want);
    if (!ok && ++bad <= 4)
      ADD_FAILURE() << "value " << v << ": got " << got[v] << " (0x" << std::hex << float_bits(got[v]) << ") want "
                    << want << " (0x" << float_bits(want) << std::dec << "); tolerance 0 bits";
  }
  EXPECT_EQ(bad, 0) << bad << " of " << n << " values wrong";
}

bool register_all() {
  for (const Corner& c : corners())
    register_case("quant", std::string("dequant_corner(type=") + type_name(c.type) + ",case=" + c.name + ")",
                  [c] { corner_case(c); });
  return true;
}

const bool registered = register_all();

}  // namespace
}  // namespace mlaconf::test
