#include "synth/block_fill.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace mlaconf::synth {
namespace {

// Mean of k^2 for integers k in [lo, hi].
double mean_sq(int lo, int hi) {
  double s = 0;
  for (int k = lo; k <= hi; ++k) s += double(k) * k;
  return s / (hi - lo + 1);
}
// Mean of (k + off)^2 for k in [lo, hi].
double mean_sq_off(int lo, int hi, double off) {
  double s = 0;
  for (int k = lo; k <= hi; ++k) s += (k + off) * (k + off);
  return s / (hi - lo + 1);
}

const int8_t kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t kMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
double table_ms(const int8_t* t) {
  double s = 0;
  for (int k = 0; k < 16; ++k) s += double(t[k]) * t[k];
  return s / 16;
}

// Sub-block scale ranges used for the K quants (kept in the upper part of the range, as a real
// quantizer's are, but random).
constexpr int kK6Lo = 24, kK6Hi = 63;   // Q4_K / Q5_K 6-bit scales
constexpr int kK4Lo = 6, kK4Hi = 15;    // Q2_K 4-bit scales
constexpr int kQ6Lo = 40, kQ6Hi = 127;  // Q6_K |int8| scales (random sign)

void put16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v); p[1] = uint8_t(v >> 8); }

// Packs 8 six-bit scales and mins the way get_scale_min_k4 unpacks them.
void pack_scale_min_k4(const int sc[8], const int mn[8], uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = uint8_t((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    q[j + 8] = uint8_t((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

}  // namespace

uint16_t float_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return uint16_t(sign | 0x7e00u);      // NaN
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);     // rounds to >= 65520: inf
  if (absx < 0x38800000u) {                                     // below 2^-14: subnormal half
    // value = absx as float; half subnormal unit = 2^-24.
    float a;
    std::memcpy(&a, &absx, 4);
    float q = std::nearbyint(a * 16777216.0f);  // round to nearest even in the default mode
    return uint16_t(sign | static_cast<uint32_t>(q));
  }
  uint32_t exp = ((absx >> 23) - 127 + 15);
  uint32_t mant = absx & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: correct
  return uint16_t(sign | h);
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}

double unit_rms(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: return 1.0;
    case GgmlType::Q4_0: return std::sqrt(mean_sq(-8, 7));
    case GgmlType::Q4_1: return std::sqrt(mean_sq_off(0, 15, -7.5));
    case GgmlType::Q5_0: return std::sqrt(mean_sq(-16, 15));
    case GgmlType::Q5_1: return std::sqrt(mean_sq_off(0, 31, -15.5));
    case GgmlType::Q8_0: return std::sqrt(mean_sq(-128, 127));
    case GgmlType::Q2_K: return std::sqrt(mean_sq(kK4Lo, kK4Hi) * mean_sq_off(0, 3, -1.5));
    case GgmlType::Q3_K: return std::sqrt(mean_sq(-32, 31) * mean_sq(-4, 3));
    case GgmlType::Q4_K: return std::sqrt(mean_sq(kK6Lo, kK6Hi) * mean_sq_off(0, 15, -7.5));
    case GgmlType::Q5_K: return std::sqrt(mean_sq(kK6Lo, kK6Hi) * mean_sq_off(0, 31, -15.5));
    case GgmlType::Q6_K: return std::sqrt(mean_sq(kQ6Lo, kQ6Hi) * mean_sq(-32, 31));
    case GgmlType::IQ4_NL: return std::sqrt(table_ms(kIq4nl));
    case GgmlType::IQ4_XS: return std::sqrt(mean_sq(-32, 31) * table_ms(kIq4nl));
    case GgmlType::MXFP4: return std::sqrt(table_ms(kMxfp4));
    // Grid types: sub-block scale factor times the grid's RMS over random indices and signs. The grid RMS
    // values were measured once by dequantizing synthesized blocks with gguf-py (llama.cpp's own numpy
    // dequantizer), not derived here: IQ2 grids {8, 25, 43}, IQ3 grids {4 .. 62}, IQ3_S odd 1..15, IQ1
    // grid {-1, 0, 1} + delta.
    case GgmlType::IQ2_XXS: return std::sqrt(mean_sq_off(0, 15, 0.5)) * 0.25 * 23.2;
    case GgmlType::IQ2_XS: case GgmlType::IQ2_S: return std::sqrt(mean_sq_off(0, 15, 0.5)) * 0.25 * 24.4;
    case GgmlType::IQ3_XXS: return std::sqrt(mean_sq_off(0, 15, 0.5)) * 0.5 * 30.8;
    case GgmlType::IQ3_S: return std::sqrt(mean_sq_off(0, 15, 0.5) * 4.0) * 7.6;
    case GgmlType::IQ1_S: case GgmlType::IQ1_M: return std::sqrt(mean_sq_off(0, 7, 0.5) * 4.0) * 0.78;
    default:
      throw InputError(std::string("synth: cannot fill tensors of type ") + type_name(t));
  }
}

void fill_blocks(GgmlType t, const ValueDist& dist, Rng& rng, uint8_t* dst, int64_t n_blocks) {
  const TypeTraits& tr = traits(t);
  const int64_t bs = tr.type_size;
  if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      double v = dist.kind == ValueDist::Normal ? dist.center + dist.spread * rng.normal()
                                                : dist.center + dist.spread * (2.0 * rng.uniform() - 1.0);
      float f = static_cast<float>(v);
      if (t == GgmlType::F32) std::memcpy(dst + 4 * i, &f, 4);
      else put16(dst + 2 * i, t == GgmlType::F16 ? float_to_fp16(f) : float_to_bf16(f));
    }
    return;
  }
  const double d = dist.rms_about_center() / unit_rms(t);
  const uint16_t dh = float_to_fp16(static_cast<float>(d));
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* b = dst + i * bs;
    rng.fill_bytes(b, static_cast<size_t>(bs));
    switch (t) {
      case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: case GgmlType::IQ4_NL:
      case GgmlType::IQ4_XS:
        // Their quant ranges are one-sided (-16..15 for Q5_0): a random sign on d, as ggml's own
        // quantizers produce (d = max / -8 keeps the sign of the largest value), centres them on zero.
        put16(b, (rng.next() & 1) ? uint16_t(dh ^ 0x8000u) : dh);
        break;
      case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S:
      case GgmlType::IQ3_XXS: case GgmlType::IQ3_S: case GgmlType::IQ1_S:
        put16(b, dh);
        break;
      case GgmlType::Q4_1:
        put16(b, dh);
        put16(b + 2, float_to_fp16(static_cast<float>(-7.5 * d)));
        break;
      case GgmlType::Q5_1:
        put16(b, dh);
        put16(b + 2, float_to_fp16(static_cast<float>(-15.5 * d)));
        break;
      case GgmlType::Q2_K: {  // scales[16] (lo nibble scale, hi nibble min), qs[64], d, dmin; min = 1.5 * scale
        for (int j = 0; j < 16; ++j) {
          int s = static_cast<int>(rng.range(kK4Lo, kK4Hi));
          b[j] = uint8_t(s | (s << 4));
        }
        put16(b + 80, dh);
        put16(b + 82, float_to_fp16(static_cast<float>(1.5 * d)));
        break;
      }
      case GgmlType::Q3_K:  // hmask[32], qs[64], scales[12] (random 6-bit, offset 32), d
        put16(b + 108, dh);
        break;
      case GgmlType::Q4_K: case GgmlType::Q5_K: {  // d, dmin, scales[12], ...; min = half range * scale
        int sc[8], mn[8];
        for (int j = 0; j < 8; ++j) sc[j] = mn[j] = static_cast<int>(rng.range(kK6Lo, kK6Hi));
        pack_scale_min_k4(sc, mn, b + 4);
        put16(b, dh);
        put16(b + 2, float_to_fp16(static_cast<float>((t == GgmlType::Q4_K ? 7.5 : 15.5) * d)));
        break;
      }
      case GgmlType::Q6_K:  // ql[128], qh[64], i8 scales[16], d
        for (int j = 0; j < 16; ++j) {
          int s = static_cast<int>(rng.range(kQ6Lo, kQ6Hi));
          b[192 + j] = static_cast<uint8_t>(static_cast<int8_t>((rng.next() & 1) ? s : -s));
        }
        put16(b + 208, dh);
        break;
      case GgmlType::IQ1_M: {  // qs[32], qh[16], scales[8]: d's nibbles are the top nibbles of the 4 u16 scales
        for (int k = 0; k < 4; ++k) {
          uint8_t* hi = b + 48 + 2 * k + 1;
          *hi = uint8_t((*hi & 0x0f) | (((dh >> (4 * k)) & 0xf) << 4));
        }
        break;
      }
      case GgmlType::MXFP4: {  // e (E8M0, d = 2^(e-128)), qs[16]
        int e = 128 + static_cast<int>(std::lround(std::log2(std::max(d, 1e-30))));
        b[0] = static_cast<uint8_t>(std::clamp(e, 1, 254));
        break;
      }
      default:
        throw InputError(std::string("synth: cannot fill tensors of type ") + type_name(t));
    }
  }
}

}  // namespace mlaconf::synth
