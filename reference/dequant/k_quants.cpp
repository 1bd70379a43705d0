// mlaconf reference: the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (256-value super-blocks).
//
// Layouts (ggml-common.h; d, dmin are IEEE halves):
//   Q2_K 84 B:  scales[16] (low nibble scale, high nibble min), qs[64] (2-bit), d, dmin
//   Q3_K 110 B: hmask[32] (3rd bit), qs[64] (low 2 bits), scales[12] (16 packed 6-bit scales), d
//   Q4_K 144 B: d, dmin, scales[12] (8 packed 6-bit scale/min pairs), qs[128] (nibbles)
//   Q5_K 176 B: d, dmin, scales[12], qh[32] (5th bit), qs[128]
//   Q6_K 210 B: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], d
// Float order follows ggml-quants.c exactly (e.g. Q4_K: (d*sc) * q - (dmin*m); Q6_K: d * sc * q).
#include "reference/dequant/dequant.h"
#include "reference/dequant/row_dequantizers.h"

namespace mlaconf::ref::detail {

namespace {

constexpr int kQK_K = 256;

// The 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes of Q4_K / Q5_K:
// j < 4 sits in the low 6 bits of q[j] and q[j+4]; j >= 4 takes a nibble of q[j+4] plus the top two
// bits of q[j-4] (scale) or q[j] (min).
void get_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace

void dequantize_row_q2_k(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, src += 84) {
    const uint8_t* scales = src;
    const uint8_t* q = src + 16;
    const float d = fp16_to_float(load_u16(src + 80));
    const float min = fp16_to_float(load_u16(src + 82));
    int is = 0;
    for (int half = 0; half < 2; ++half) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        uint8_t sc = scales[is++];
        float dl = d * (sc & 0xF);
        float ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<int8_t>((q[l] >> shift) & 3) - ml;
        sc = scales[is++];
        dl = d * (sc & 0xF);
        ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<int8_t>((q[l + 16] >> shift) & 3) - ml;
        shift += 2;
      }
      q += 32;
    }
  }
}

void dequantize_row_q3_k(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, src += 110) {
    const uint8_t* hm = src;
    const uint8_t* q = src + 32;
    const uint8_t* s = src + 96;
    const float d_all = fp16_to_float(load_u16(src + 108));
    // 16 signed 6-bit scales: low 4 bits from s[0..7] (low nibbles for 0..7, high nibbles for 8..15),
    // high 2 bits from s[8..11] (scale j uses bits 2*(j/4) of s[8 + j%4]); stored with offset 32.
    int8_t scales[16];
    for (int j = 0; j < 16; ++j) {
      const int low = (j < 8 ? s[j] : s[j - 8] >> 4) & 0xF;
      const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
      scales[j] = static_cast<int8_t>((low | (hi << 4)) - 32);
    }
    int is = 0;
    uint8_t m = 1;
    for (int half = 0; half < 2; ++half) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        float dl = d_all * scales[is++];
        for (int l = 0; l < 16; ++l)
          *y++ = dl * (static_cast<int8_t>((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
        dl = d_all * scales[is++];
        for (int l = 0; l < 16; ++l)
          *y++ = dl * (static_cast<int8_t>((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
        shift += 2;
        m = static_cast<uint8_t>(m << 1);
      }
      q += 32;
    }
  }
}

void dequantize_row_q4_k(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, src += 144) {
    const float d = fp16_to_float(load_u16(src));
    const float min = fp16_to_float(load_u16(src + 2));
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < kQK_K; j += 64) {
      get_scale_min_k4(is + 0, scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void dequantize_row_q5_k(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, src += 176) {
    const float d = fp16_to_float(load_u16(src));
    const float min = fp16_to_float(load_u16(src + 2));
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* ql = src + 48;
    int is = 0;
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;  // the qh bit of the low / high nibble of this 64-value chunk
    for (int j = 0; j < kQK_K; j += 64) {
      get_scale_min_k4(is + 0, scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void dequantize_row_q6_k(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, src += 210) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = fp16_to_float(load_u16(src + 208));
    for (int half = 0; half < 2; ++half) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        const int8_t q2 = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        const int8_t q3 = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        const int8_t q4 = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

}  // namespace mlaconf::ref::detail
