// mlaconf optimized: block-streaming dequant GEMV for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q5_K, Q6_K.
//
// Why: the generic kernel (gemv.cu) reads a row with one dq_elem per element and re-reads and
// re-decodes the matrix for every x of a batch; on the H200 the Q6_K output head ran at 20-160 GB/s.
// Here a warp streams 4 rows' bytes in chunks of 32 sub-blocks (32 values each) with 16-byte cp.async
// into shared memory (double-buffered per warp; zero-fill past the matrix end, so nothing outside the
// matrix is read whatever the block size's alignment). In each chunk of 1024 values lane l decodes the
// 8-value groups l, l + 32, l + 64, l + 96 (values [256 p + 8 l, + 8) for p = 0..3) of each of the 4 rows
// with the exact ggml formulas (dq_elem, the dequant kernels' function; word-wise for Q6_K / Q5_K) and
// multiplies every value with every x of the pass (up to kMaxX): the 32 lanes read 1 KB of contiguous x
// per pass (giving lane l sub-block l instead, one x load touched 32 cache lines). The batch entries that
// use the same matrix form one group (one grid.y index); weights are decoded once per pass of kMaxX of them.
//
// Bit-identity (batched decode promises each sequence the bits of decoding alone): the result of
// (row, x) is lane l's fmaf chain over the values of the 8-value groups l, l + 32, l + 64, ... (columns
// c with (c / 8) % 32 == l) in column order, then a fixed xor-shuffle tree over the 32 lanes. Nothing in
// it depends on the batch, the grouping, the pass width NB or the other rows; products and sums are
// explicit intrinsics (no contraction choices). Q8_0 keeps the mapping of a sub-block per lane and its order
// (lane l sums sub-blocks l, l + 32, ... in column order; measured faster for it).
#include <cuda_runtime.h>

#include <algorithm>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"
#include "optimized/dequant_elem.cuh"
#include "optimized/gemv_blocks.cuh"
#include "optimized/mma.cuh"

namespace mlaconf::cuda {
namespace {

constexpr int kWarps = 4;         // warps per CTA
constexpr int kRowsPerWarp = 4;   // rows a warp streams together (x loads shared by them)
constexpr int kThreads = 32 * kWarps;
constexpr int kRowsPerCta = kWarps * kRowsPerWarp;
constexpr int kMaxX = 8;          // x vectors per pass (the widest NB)

template <int TYPE> struct Shape;
template <> struct Shape<kQ4_0> { static constexpr int bs = 32, ts = 18; };
template <> struct Shape<kQ4_1> { static constexpr int bs = 32, ts = 20; };
template <> struct Shape<kQ5_0> { static constexpr int bs = 32, ts = 22; };
template <> struct Shape<kQ5_1> { static constexpr int bs = 32, ts = 24; };
template <> struct Shape<kQ8_0> { static constexpr int bs = 32, ts = 34; };
template <> struct Shape<kQ2_K> { static constexpr int bs = 256, ts = 84; };
template <> struct Shape<kQ3_K> { static constexpr int bs = 256, ts = 110; };
template <> struct Shape<kQ5_K> { static constexpr int bs = 256, ts = 176; };
template <> struct Shape<kQ6_K> { static constexpr int bs = 256, ts = 210; };

// Values i0 .. i0 + 7 (i0 a multiple of 8) of the block at b (shared memory), bit for bit dq_elem's: the
// generic form calls it per value; Q6_K and Q5_K (the GLM-5 attention / head types) decode 4 values per
// 32-bit word with the same products (tested bit for bit against the reference dequantizer's values).
template <int TYPE>
__device__ __forceinline__ void decode8(const uint8_t* b, int i0, float (&w)[8]) {
  const IqGrids grids{};  // unused by these types
#pragma unroll
  for (int e = 0; e < 8; ++e) w[e] = dq_elem(TYPE, b, i0 + e, grids);
}
template <>
__device__ __forceinline__ void decode8<kQ6_K>(const uint8_t* b, int i0, float (&w)[8]) {
  // ql[128] qh[64] scales[16] d: value i = (n, gq, l): 6-bit q from ql (low / high nibble) and qh (2 bits).
  const int n = i0 >> 7, r = i0 & 127, gq = r >> 5, l0 = r & 31;
  const uint8_t* ql = b + 64 * n + ((gq & 1) ? 32 : 0) + l0;
  const uint8_t* qh = b + 128 + 32 * n + l0;
  const float dsc = MUL_RN(ld_f16_hw(b + 208), (float)(int8_t)b[192 + 8 * n + (l0 >> 4) + 2 * gq]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t q = lds_u32(ql + 4 * h), hb = lds_u32(qh + 4 * h);
    const uint32_t lo = (gq < 2 ? q : q >> 4) & 0x0F0F0F0Fu;
    const uint32_t qq = lo | (((hb >> (2 * gq)) & 0x03030303u) << 4);
#pragma unroll
    for (int k = 0; k < 4; ++k) w[4 * h + k] = MUL_RN(dsc, byte_as_float(qq, k, 32.f));
  }
}
template <>
__device__ __forceinline__ void decode8<kQ5_K>(const uint8_t* b, int i0, float (&w)[8]) {
  // d dmin scales[12] qh[32] qs[128]: sub-block j = 2c + hi; q = nibble + 16 * (bit j of qh[l]).
  const int c = i0 >> 6, hi = (i0 >> 5) & 1, l0 = i0 & 31, j = 2 * c + hi;
  int sc, m;
  scale_min_k4(j, b + 4, &sc, &m);
  const float d1 = MUL_RN(ld_f16_hw(b), (float)sc), m1 = MUL_RN(ld_f16_hw(b + 2), (float)m);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t q = lds_u32(b + 48 + 32 * c + l0 + 4 * h), hb = lds_u32(b + 16 + l0 + 4 * h);
    const uint32_t qq = ((hi ? q >> 4 : q) & 0x0F0F0F0Fu) | (((hb >> j) & 0x01010101u) << 4);
#pragma unroll
    for (int k = 0; k < 4; ++k) w[4 * h + k] = SUB_RN(MUL_RN(d1, byte_as_float(qq, k, 0.f)), m1);
  }
}
template <>
__device__ __forceinline__ void decode8<kQ5_0>(const uint8_t* b, int i0, float (&w)[8]) {
  // d qh[4] qs[16] (GLM-5's attn_k_b type: its 192 columns are no multiple of 256): value i = 16 n + j has
  // the nibble n of qs[j] and bit i of qh as bit 4; (q - 16) d as dq_elem computes it. A block starts at an
  // even offset (22-byte blocks of rows of even size from a 16-byte aligned matrix). dq_elem decoded each
  // value alone (~20 instructions: byte loads of qh and qs per value); here 4 values per word.
  const float d = ld_f16_hw(b);
  const uint32_t qh = lds_u32(b + 2);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = i0 + 4 * h;  // the 4 values i .. i + 3
    const uint32_t q = lds_u32(b + 6 + (i & 15));
    const uint32_t hb4 = (qh >> i) & 0xFu;  // bit k of the 4 into bit 4 of byte k (no two partial products overlap)
    const uint32_t qq = ((i < 16 ? q : q >> 4) & 0x0F0F0F0Fu) | (((hb4 * 0x00204081u) & 0x01010101u) << 4);
#pragma unroll
    for (int k = 0; k < 4; ++k) w[4 * h + k] = MUL_RN(byte_as_float(qq, k, 16.f), d);
  }
}

// acc[rr][j] += the 8 decoded values of each row rr times x[0..8), one fmaf chain in column order (the
// order suites/gpu emulates), for both mappings.
template <int NB>
__device__ __forceinline__ void fma_rows(float (&acc)[kRowsPerWarp][NB], int j, const float (&wv)[kRowsPerWarp][8],
                                         const float* x) {
  const float4 x0 = __ldg(reinterpret_cast<const float4*>(x));
  const float4 x1 = __ldg(reinterpret_cast<const float4*>(x + 4));
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    float s = acc[rr][j];
    s = fmaf(wv[rr][0], x0.x, s);
    s = fmaf(wv[rr][1], x0.y, s);
    s = fmaf(wv[rr][2], x0.z, s);
    s = fmaf(wv[rr][3], x0.w, s);
    s = fmaf(wv[rr][4], x1.x, s);
    s = fmaf(wv[rr][5], x1.y, s);
    s = fmaf(wv[rr][6], x1.z, s);
    s = fmaf(wv[rr][7], x1.w, s);
    acc[rr][j] = s;
  }
}

struct Args {
  const uint8_t* w;
  int64_t n_rows, nblocks, row_bytes;  // nblocks: blocks per row
  const int32_t* ids;                  // expert id per batch entry, or null
  int64_t w_count, w_stride, batch;
  int64_t step;                        // without ids: members of group g are g, g + step, ...
  const float* x;
  int64_t x_stride;
  float* y;
  int64_t y_stride;
};

// The next <= NB members of a group without ids from `cursor` (advanced past them): cursor, cursor + step, ...
// below the batch, in batch order; stored in s_b where `store`.
template <int NB>
__device__ __forceinline__ int step_members(const Args& a, int64_t& cursor, int64_t* s_b, bool store) {
  int n = 0;
  for (; n < NB && cursor < a.batch; ++n, cursor += a.step)
    if (store) s_b[n] = cursor;
  return n;
}

// grid (ceil(n_rows / kRowsPerCta), groups). Group g: without ids, the batch entries g, g + step, ...
// (one matrix); with ids, entry g and every later entry with the same id, run by the CTA of the
// group's first entry (the CTAs of the other entries return at once).
// MODE 0: lane l takes the 8-value groups l, l + 32, ...; 1: lane l takes sub-block l (another order; Q8_0's).
// (kUnroll is 1: a MODE that took two of the four 256-value passes together measured mixed and was removed.)
template <int TYPE, int NB, int MODE>
__global__ void __launch_bounds__(kThreads) gemv_blocks_kernel(Args a) {
  constexpr bool LEGACY = MODE == 1;  // a sub-block per lane
  constexpr int kUnroll = 1;  // 256-value passes taken together (see above)
  using S = Shape<TYPE>;
  constexpr int kSpb = S::bs / 32;                        // sub-blocks (lanes) per block
  constexpr int kBpc = 32 / kSpb;                         // blocks per chunk (32 sub-blocks)
  constexpr int kChunkBytes = kBpc * S::ts;
  // + the row chunk's 0..15-byte misalignment, + headroom for lds_u32's second word.
  constexpr int kSlot = (kChunkBytes + 15) / 16 * 16 + 32;
  __shared__ __align__(16) uint8_t stage[kWarps][2][kRowsPerWarp][kSlot];
  __shared__ int64_t s_b[NB];
  __shared__ int s_n;
  __shared__ int64_t s_cursor;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t g = blockIdx.y;
  int64_t mat = a.w_stride == 0 ? 0 : g % a.w_count;
  int32_t key = 0;
  if (a.ids) {
    key = a.ids[g];
    bool dup = false;
    for (int64_t k = tid; k < g; k += kThreads) dup |= a.ids[k] == key;
    if (__syncthreads_or(dup)) return;  // an earlier entry's CTA runs this matrix
    mat = key;
  }
  const uint8_t* wm = a.w + mat * a.w_stride;
  const uint8_t* mat_end = wm + a.n_rows * a.row_bytes;
  const int64_t row0 = (int64_t)blockIdx.x * kRowsPerCta + warp * kRowsPerWarp;
  const int64_t nchunks = (a.nblocks + kBpc - 1) / kBpc, nsub = a.nblocks * kSpb, ncols = nsub * 32;

  // One row's chunk c: its aligned 16-byte words into stage[warp][buf][rr], zero past the matrix end.
  auto issue = [&](int64_t c, int buf) {
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int64_t row = row0 + rr;
      if (row >= a.n_rows) break;
      const uint8_t* gs = wm + row * a.row_bytes + c * kChunkBytes;
      const int64_t nbk = min((int64_t)kBpc, a.nblocks - c * kBpc);
      const uint8_t* w0 = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(gs) & ~(uintptr_t)15);
      const int nw = (int)((gs + nbk * S::ts - w0 + 15) >> 4);
      const uint32_t dst = (uint32_t)__cvta_generic_to_shared(&stage[warp][buf][rr][0]);
      for (int i = lane; i < nw; i += 32) {
        const uint8_t* src = w0 + 16 * i;
        const int64_t left = mat_end - src;
        if (left >= 16) {
          cp_async_16(dst + 16 * i, src, 16);
        } else {
          // The matrix's last word: byte loads, so that nothing past the matrix is even addressed (a
          // 16-byte cp.async with a smaller source size is reported as a 16-byte read by memcheck).
          uint8_t* d = &stage[warp][buf][rr][16 * i];
          for (int b = 0; b < 16; ++b) d[b] = b < left ? src[b] : (uint8_t)0;
        }
      }
    }
  };

  int64_t cursor = g;  // the next batch entry that may belong to the group
  for (;;) {
    // The group's next <= NB members (warp 0), in batch order.
    if (warp == 0) {
      int n = 0;
      if (!a.ids) {
        n = step_members<NB>(a, cursor, s_b, lane == 0);
      } else {
        while (n < NB && cursor < a.batch) {
          const int64_t k = cursor + lane;
          const bool m = k < a.batch && a.ids[k] == key;
          const unsigned bal = __ballot_sync(0xffffffffu, m);
          const int pos = __popc(bal & ((1u << lane) - 1u)), take = min(__popc(bal), NB - n);
          if (m && pos < take) s_b[n + pos] = k;
          const unsigned left_over = __ballot_sync(0xffffffffu, m && pos == take);
          cursor = left_over ? cursor + (__ffs(left_over) - 1) : cursor + 32;
          n += take;
        }
      }
      if (lane == 0) {
        s_n = n;
        s_cursor = cursor;
      }
    }
    __syncthreads();
    const int nm = s_n;
    cursor = s_cursor;
    if (nm == 0) return;
    int64_t bx[NB];
#pragma unroll
    for (int j = 0; j < NB; ++j) bx[j] = j < nm ? s_b[j] : 0;
    __syncthreads();  // s_b / s_n are rewritten by the next pass

    float acc[kRowsPerWarp][NB];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
      for (int j = 0; j < NB; ++j) acc[rr][j] = 0.f;

    if (row0 < a.n_rows) {
      issue(0, 0);
      cp_async_commit();
      for (int64_t c = 0; c < nchunks; ++c) {
        if (c + 1 < nchunks) issue(c + 1, (int)((c + 1) & 1));
        cp_async_commit();  // possibly empty: keeps the wait count uniform
        cp_async_wait<1>();
        __syncwarp();
        const int buf = (int)(c & 1);
        if (!LEGACY) {
          // Lane l takes values [256 p + 8 l, + 8) of the chunk's 1024 for p = 0..3: the lanes of a warp read
          // 1 KB of contiguous x per pass (MODE 1's lane-per-sub-block mapping spreads them over 32 lines).
          int base[kRowsPerWarp];
          bool ok[kRowsPerWarp];
#pragma unroll
          for (int rr = 0; rr < kRowsPerWarp; ++rr) {
            const int64_t row = row0 + rr;
            ok[rr] = row < a.n_rows;
            base[rr] = (int)(reinterpret_cast<uintptr_t>(wm + row * a.row_bytes + c * kChunkBytes) & 15);
          }
#pragma unroll 1
          for (int p0 = 0; p0 < 4; p0 += kUnroll)
#pragma unroll
          for (int p = p0; p < p0 + kUnroll; ++p) {
            const int v = 256 * p + 8 * lane;
            const int64_t col = c * 1024 + v;
            if (col >= ncols) break;
            const int kb = v / S::bs, i0 = v % S::bs;
            float wv[kRowsPerWarp][8];
#pragma unroll
            for (int rr = 0; rr < kRowsPerWarp; ++rr) {
              if (ok[rr]) {
                decode8<TYPE>(&stage[warp][buf][rr][base[rr] + kb * S::ts], i0, wv[rr]);
              } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) wv[rr][e] = 0.f;
              }
            }
#pragma unroll
            for (int j = 0; j < NB; ++j) {
              if (j >= nm) break;
              fma_rows(acc, j, wv, a.x + bx[j] * a.x_stride + col);
            }
          }
        }
        const int64_t u = c * 32 + lane;  // MODE 1: this lane's sub-block of the row
        if (LEGACY && u < nsub) {
          const int kb = lane / kSpb, sub = lane % kSpb;
          const uint8_t* bp[kRowsPerWarp];
          bool ok[kRowsPerWarp];
#pragma unroll
          for (int rr = 0; rr < kRowsPerWarp; ++rr) {
            const int64_t row = row0 + rr;
            ok[rr] = row < a.n_rows;
            const uintptr_t gs = reinterpret_cast<uintptr_t>(wm + row * a.row_bytes + c * kChunkBytes);
            bp[rr] = &stage[warp][buf][rr][(gs & 15) + kb * S::ts];
          }
          const float* xs[NB];
#pragma unroll
          for (int j = 0; j < NB; ++j) xs[j] = a.x + bx[j] * a.x_stride + u * 32;
#pragma unroll 1  // (unrolled: 4x the code and compile time, more registers)
          for (int p = 0; p < 4; ++p) {
            float wv[kRowsPerWarp][8];
#pragma unroll
            for (int rr = 0; rr < kRowsPerWarp; ++rr) {
              if (ok[rr]) {
                decode8<TYPE>(bp[rr], sub * 32 + 8 * p, wv[rr]);
              } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) wv[rr][e] = 0.f;
              }
            }
#pragma unroll
            for (int j = 0; j < NB; ++j) {
              if (j >= nm) break;
              fma_rows(acc, j, wv, xs[j] + 8 * p);
            }
          }
        }
        __syncwarp();  // the buffer is refilled two chunks on
      }
    }
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        float v = acc[rr][j];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0 && j < nm && row0 + rr < a.n_rows) a.y[bx[j] * a.y_stride + row0 + rr] = v;
      }
  }
}

// ---- short rows: a row per lane ----
// Per-entry matrices (gemv_per_head, apply_wuv: entry b on matrix b % w_count, no expert ids) of rows of at most
// kShortMaxCols values of a 32-value block type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) (GLM-5's attn_k_b: 64 heads of 512 x 192 Q5_0,
// the absorbed query's W_UK^T at every decode step). The kernel above gives a row 4 lanes' worth of a
// 1024-value chunk: at 192 columns 24 of 32 lanes work on one 16-row tile per CTA, 2048 CTAs of 23.6 KB for
// 4.3 MB of weights (H200, ncu: 15-16 us, the SMs 58 % busy, 2.6 waves). Here lane l of a warp owns row
// r0 + l: the warp's 32 rows (contiguous in memory) arrive by one coalesced 16-byte cp.async sweep, the
// pass's x vectors go to shared memory, and each lane decodes its row from shared memory (row stride
// row_bytes: 132 bytes at 192 Q5_0 columns, an odd word count, so the lanes' words fall in distinct banks)
// and multiplies it with each x (broadcast reads).
// Order of sums: (row, x) is one fmaf chain over the columns in order, from 0: a function of the row and
// x alone (batch invariance holds); suites/gpu emulates it.
constexpr int kShortWarps = 4;
constexpr int64_t kShortMaxCols = 256;
template <int TYPE, int NB>
__global__ void __launch_bounds__(32 * kShortWarps) gemv_short_rows_kernel(Args a) {
  using S = Shape<TYPE>;
  constexpr int kMaxRowBytes = (int)(kShortMaxCols / S::bs) * S::ts;
  // 32 rows, + the first row's 0..15-byte misalignment, + headroom for lds_u32's second word.
  constexpr int kWarpBytes = (32 * kMaxRowBytes + 15) / 16 * 16 + 32;
  __shared__ __align__(16) uint8_t stage[kShortWarps][kWarpBytes];
  __shared__ __align__(16) float xs[NB][kShortMaxCols];
  __shared__ int64_t s_b[NB];
  __shared__ int s_n;
  __shared__ int64_t s_cursor;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t g = blockIdx.y;
  const int64_t mat = a.w_stride == 0 ? 0 : g % a.w_count;
  const uint8_t* wm = a.w + mat * a.w_stride;
  const uint8_t* mat_end = wm + a.n_rows * a.row_bytes;
  const int64_t r0 = (int64_t)blockIdx.x * (32 * kShortWarps) + 32 * warp, row = r0 + lane;
  const int64_t ncols = a.nblocks * S::bs;
  // The warp's rows, once for every pass: aligned 16-byte words, byte loads for the matrix's last word.
  int mis = 0;
  if (r0 < a.n_rows) {
    const uint8_t* src = wm + r0 * a.row_bytes;
    const uint8_t* w0 = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(src) & ~(uintptr_t)15);
    mis = (int)(src - w0);
    const int64_t nrows = min((int64_t)32, a.n_rows - r0);
    const int nw = (int)((mis + nrows * a.row_bytes + 15) >> 4);
    const uint32_t dst = (uint32_t)__cvta_generic_to_shared(&stage[warp][0]);
    for (int i = lane; i < nw; i += 32) {
      const uint8_t* p = w0 + 16 * i;
      const int64_t left = mat_end - p;
      if (left >= 16) {
        cp_async_16(dst + 16 * i, p, 16);
      } else {
        uint8_t* d = &stage[warp][16 * i];
        for (int b = 0; b < 16; ++b) d[b] = b < left ? p[b] : (uint8_t)0;
      }
    }
  }
  cp_async_commit();
  const uint8_t* myrow = &stage[warp][mis] + lane * a.row_bytes;
  int64_t cursor = g;  // the group's members: g, g + step, ... (one matrix)
  for (;;) {
    if (tid == 0) {
      s_n = step_members<NB>(a, cursor, s_b, true);
      s_cursor = cursor;
    }
    __syncthreads();
    const int nm = s_n;
    cursor = s_cursor;
    if (nm == 0) break;
    int64_t bx[NB];
#pragma unroll
    for (int j = 0; j < NB; ++j) bx[j] = j < nm ? s_b[j] : 0;
    for (int i = tid; i < nm * (int)ncols; i += 32 * kShortWarps) {
      const int j = i / (int)ncols, c = i - j * (int)ncols;
      xs[j][c] = __ldg(a.x + s_b[j] * a.x_stride + c);
    }
    cp_async_wait<0>();
    __syncthreads();
    if (row < a.n_rows) {
      float acc[NB];
#pragma unroll
      for (int j = 0; j < NB; ++j) acc[j] = 0.f;
#pragma unroll 1
      for (int64_t kb = 0; kb < a.nblocks; ++kb)
#pragma unroll
        for (int i0 = 0; i0 < S::bs; i0 += 8) {
          float w[8];
          decode8<TYPE>(myrow + kb * S::ts, i0, w);
          const int64_t c = kb * S::bs + i0;
#pragma unroll
          for (int j = 0; j < NB; ++j) {
            if (j >= nm) break;
            const float4 x0 = *reinterpret_cast<const float4*>(&xs[j][c]), x1 = *reinterpret_cast<const float4*>(&xs[j][c + 4]);
            float v = acc[j];
            v = fmaf(w[0], x0.x, v), v = fmaf(w[1], x0.y, v), v = fmaf(w[2], x0.z, v), v = fmaf(w[3], x0.w, v);
            v = fmaf(w[4], x1.x, v), v = fmaf(w[5], x1.y, v), v = fmaf(w[6], x1.z, v), v = fmaf(w[7], x1.w, v);
            acc[j] = v;
          }
        }
#pragma unroll
      for (int j = 0; j < NB; ++j)
        if (j < nm) a.y[bx[j] * a.y_stride + row] = acc[j];
    }
    __syncthreads();  // xs, s_b and s_n are rewritten by the next pass
  }
  cp_async_wait<0>();  // a CTA whose group had no member never waited for its rows
}

template <int TYPE>
void launch_short(const Args& a, int64_t groups, bool wide) {
  static_assert(Shape<TYPE>::bs == 32, "the short-row kernel unrolls a block's 4 groups of 8 values");
  const dim3 grid(ceil_div(a.n_rows, 32 * kShortWarps), (unsigned)groups);
  if (wide)
    gemv_short_rows_kernel<TYPE, kMaxX><<<grid, 32 * kShortWarps, 0, cur_stream()>>>(a);
  else
    gemv_short_rows_kernel<TYPE, 1><<<grid, 32 * kShortWarps, 0, cur_stream()>>>(a);
  MLACONF_CUDA_LAUNCH_CHECK("gemv_short_rows_kernel");
}

template <int TYPE>
bool launch(const Args& a, int64_t groups, bool wide) {
  if (traits(static_cast<GgmlType>(TYPE)).type_size != Shape<TYPE>::ts ||
      traits(static_cast<GgmlType>(TYPE)).block_size != Shape<TYPE>::bs)
    return false;
  const dim3 grid(ceil_div(a.n_rows, kRowsPerCta), (unsigned)groups);
  // Q8_0 keeps the mapping of one sub-block per lane (MODE 1): on the H200 the coalesced one was 2 % slower
  // at B = 1 and 6 % at B = 8 for it (docs/perf/gemv-blocks.md).
  constexpr bool kLaneSub = TYPE == kQ8_0;
  // Short rows of 32-value blocks on per-entry matrices without ids (gemv_per_head, apply_wuv): a row per lane
  // (above). Not for one matrix or expert ids: an expert's matrix runs as one matrix in forward() and by id in a
  // batched decode, and both must keep the same order of sums.
  if constexpr (Shape<TYPE>::bs == 32) {
    if (!a.ids && a.w_stride != 0 && a.w_count > 1 && a.nblocks * 32 <= kShortMaxCols) {
      launch_short<TYPE>(a, groups, wide);
      return true;
    }
  }
  constexpr int kMode = kLaneSub ? 1 : 0;  // one mapping per type: the other is never instantiated
  if (wide)
    gemv_blocks_kernel<TYPE, kMaxX, kMode><<<grid, kThreads, 0, cur_stream()>>>(a);
  else
    gemv_blocks_kernel<TYPE, 1, kMode><<<grid, kThreads, 0, cur_stream()>>>(a);
  MLACONF_CUDA_LAUNCH_CHECK("gemv_blocks_kernel");
  return true;
}

}  // namespace

bool gemv_blocks_covers(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q5_K: case GgmlType::Q6_K: return true;
    default: return false;
  }
}

bool gemv_blocks(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const int32_t* d_ids, int64_t w_count,
                 int64_t w_stride, const float* d_x, int64_t x_stride, float* d_y, int64_t y_stride, int64_t batch) {
  if (!gemv_blocks_covers(t) || n_rows <= 0 || batch <= 0 || w_count <= 0) return false;
  // A matrix may start anywhere (w_stride need not be a multiple of 16): each row's loads already start
  // at its 16-byte-aligned address below, and the bytes before it belong to the previous matrix (or row),
  // which a 16-byte-aligned d_w keeps inside the allocation.
  if ((reinterpret_cast<uintptr_t>(d_w) % 16) || (reinterpret_cast<uintptr_t>(d_x) % 16) || x_stride % 4)
    return false;
  const auto& tr = traits(t);
  if (ncols % tr.block_size) return false;
  // Groups of batch entries sharing a matrix: with ids, one candidate per entry (the first of each id
  // runs); else one group when all share the matrix, or the w_count residues (step w_count).
  int64_t groups, step = 1, largest;
  if (d_ids) {
    groups = batch;
    largest = batch;  // unknown on the host: the wide pass as soon as two entries may share
  } else if (w_stride == 0 || w_count == 1) {
    groups = 1;
    largest = batch;
  } else {
    groups = std::min(w_count, batch);
    step = w_count;
    largest = (batch + w_count - 1) / w_count;
  }
  if (groups > 65535) return false;
  Args a{static_cast<const uint8_t*>(d_w), n_rows, ncols / tr.block_size, row_bytes(t, ncols), d_ids, w_count, w_stride,
         batch, step, d_x, x_stride, d_y, y_stride};
  const bool wide = largest > 1;
  switch (t) {
    case GgmlType::Q4_0: return launch<kQ4_0>(a, groups, wide);
    case GgmlType::Q4_1: return launch<kQ4_1>(a, groups, wide);
    case GgmlType::Q5_0: return launch<kQ5_0>(a, groups, wide);
    case GgmlType::Q5_1: return launch<kQ5_1>(a, groups, wide);
    case GgmlType::Q8_0: return launch<kQ8_0>(a, groups, wide);
    case GgmlType::Q2_K: return launch<kQ2_K>(a, groups, wide);
    case GgmlType::Q3_K: return launch<kQ3_K>(a, groups, wide);
    case GgmlType::Q5_K: return launch<kQ5_K>(a, groups, wide);
    case GgmlType::Q6_K: return launch<kQ6_K>(a, groups, wide);
    default: return false;
  }
}

}  // namespace mlaconf::cuda
