// mlaconf optimized: dequant GEMV on the tensor cores for Q4_K and Q6_K (the GLM-5 quants' expert,
// projection and output-head types).
//
// Why: on the H200 the SIMT kernels ran these at 16-28% of copy bandwidth, limited by instructions: the
// Q6_K block kernel issued 19 instructions per weight per lane (ncu: issue slots 79% busy, the output head
// at 27% of its floor), the Q4_K kernel by L1 wavefronts (per-lane 16-byte loads over 8 rows). Here a warp
// takes 16 rows (the mma's M) and streams their blocks through shared memory with 16-byte cp.async (a row's
// block is contiguous, so a warp's copy touches few cache lines); one mma.sync m16n8k16 multiplies 16 rows x
// 16 values by 8 columns of x. The A operand, exactly:
//   Q6_K: each lane turns 4 values of each of its two rows into fp16 q - 32 (1024 + q built in the mantissa,
//         1056 subtracted); per sub-block (16 values) the fp32 partial is multiplied by its
//         integer scale, per block by d 2^-e.
//   Q4_K: sc q in fp16 (<= 945, exact), from two nibbles per LOP3 and one HFMA2 (block_q4k), so a whole
//         block accumulates in the tensor cores; per block y += d 2^-e C - dmin M, M the sub-blocks' m times
//         their sums of x by one more mma. That took the block's hot loop from 561 to 374 instructions per warp
//         at one x per pass against scaling each sub-block's partial (sm_90 SASS; docs/perf/gemv-blocks.md).
//
// Precision: x (fp32) is scaled per 256-value block by a power of two and split into two fp16 terms hi + lo
// (lo the rounding of what hi left), and the 8 columns of an mma are (4 x) x (2 terms): lane t's two output
// columns are x slot t's hi and lo, added per block in the lane. The integer q - 32 (Q6_K) or sc q (Q4_K)
// times a term is exact in the tensor core's fp32 accumulation; x itself is carried to ~2^-22 of its value
// (bench/x_terms_error.py: at most 1.5e-8 of sum |w x| with 100x outliers, under the fp32 accumulation's own
// 7e-8-1.4e-7). Why two terms and not three: with three 16-bit terms in 6 of the 8 columns (2 x per mma) the GEMV
// was bound by its mma work per x from 16 x on, and torch's fp16 F.linear was 2-5x faster (docs/perf/h200-2026-12-02.md).
// Error against float64: suites/gpu test_gemv_mma measures it, including x from 2^-100 to 2^100. The default
// for matrices of at least 1024 x 2048 (gemv_mma_by_default: on the H200 faster than the SIMT kernels there at
// B = 8, and for Q6_K at B = 1; docs/perf/gemv-blocks.md).
//
// Bit-identity across batches: a column's result depends only on its own x and the rows' weights (an mma
// output element is the same function of its A row and B column whatever the other columns hold), and the
// order of a row's sums is a function of the matrix shape alone: up to 128 row tiles K is 8 chunks whose sums
// are added in pairs, then the pairs in order, whether 4 warps (the experts) or 8 (one matrix) compute them,
// so an expert by id gives the bits of its matrix alone; beyond, K is split over ks warps by the shape, the
// partials added in warp order. So batched decode gives every sequence the bits of decoding it alone.
//
// Only sm_90 / sm_120 instructions: mma.sync (bf16, f16), cp.async; at most 69.6 KB of dynamic shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"
#include "optimized/dequant_elem.cuh"
#include "optimized/faults.h"
#include "optimized/gemv_mma.cuh"
#include "optimized/gemv_mma_blocks.cuh"
#include "optimized/gemv_mma_x.cuh"
#include "optimized/mma.cuh"

namespace mlaconf::cuda {
namespace {

// ---- the GEMV ----
struct MmaArgs {
  const uint8_t* w;
  int64_t n_rows, row_bytes;
  int nb;      // blocks (256 values) per row
  int rt, ks;  // row tiles (16 rows) per CTA, warps per row tile splitting K; rt * ks == the CTA's warps
  // The order of a row's sums (split8 in gemv_mma): up to 128 row tiles a row's K is 8 chunks whose sums are
  // added in pairs, then the pairs in order, whatever ks: at ks = 4 (cpw = 2 chunks per warp) a warp adds its
  // two, at ks = 8 the reduction pairs them (pair_red). Else K is ks chunks added in order (cpw = 1).
  int cpw;
  bool pair_red;
  const int32_t* ids;
  int64_t w_count, w_stride, batch;
  bool shared;  // one matrix for the batch: entry group y (entries epp y .. epp y + epp - 1, slots = entries)
  int epp;      // shared: entries per pass (4 x the column groups' cap, 16 or 8)
  int ny;       // shared: entry groups, the fastest-varying part of blockIdx.x
  bool one_x;   // (not shared) every entry reads x slot 0
  const uint8_t* w_alt;  // (ids) the matrix of id -1: a shared expert taken as one more entry, or null
  // Grouped experts (shared passes per expert; `shared` is set): CTA row y takes groups[y] = (expert, first
  // slot, end slot), slots sorted by expert (group_pairs), when y < *n_groups; its column group is the 4 slots
  // from 2 floor(first / 2) on (each lane's x address its own: they may span two of split_x's column groups),
  // and it writes only its own slots, slot s to row out_rows[s] (null: s).
  const int4* groups;
  const int32_t* n_groups;
  const int32_t* out_rows;
  const uint2* xi;     // split_x's xi, xf and xm (Q4_K; gemv_mma_x.cu)
  const float* xf;
  const uint2* xm;
  float* y;
  int64_t y_stride;
};

// grid: shared matrix, ceil(tiles / rt) * ny (row-tile block tb = blockIdx.x / ny, entry group blockIdx.x % ny);
// else (ceil(tiles / rt), batch). Warp w: row tile tb * rt + w / ks, blocks [nb * kp / ks, nb * (kp + 1) / ks)
// of it for kp = w % ks. W warps per CTA (rt * ks == W).
// Resident warps per SM the registers must allow: 16 (128 registers): at most 4 groups of 4 x hold 8 sums and 32 mma
// outputs per lane (8 groups of 2 x, 64-96 fp32 sums per lane, needed ~255 registers: 8 warps).
template <int NCG, int W>
constexpr int min_ctas() {
  static_assert(NCG <= kMaxCg, "16 resident warps per SM hold at most kMaxCg column groups");
  return 16 / W;
}
// XS: x through shared memory (kernel_smem): a shared pass of kMaxCg column groups with K not split (every warp of the
// CTA streams the same blocks), or grouped experts' passes in CTAs of 2 row tiles (the warps of a K part stream the
// same blocks); the warps sharing x wait for each other at each block.
// XW: x staged per warp (kXwStage), a Q4_K pass of one live slot.
template <int TYPE, int NCG, int W, bool XS, bool XW = false>
__global__ void __launch_bounds__(32 * W, min_ctas<NCG, W>()) gemv_mma_kernel(MmaArgs a) {
  using S = MmaShape<TYPE>;
  static_assert(!XS || (((NCG == kMaxCg && W == kWarps) || NCG == 1) && S::stages == 2),
                "x through shared memory: passes of 16 x in CTAs of 8 (K not split), or one column group (grouped experts)");
  static_assert(!XW || (TYPE == kQ4_K && !XS && NCG == 1 && S::stages == 2), "x staged per warp: Q4_K, one column group, two stages");
  constexpr int kSlot = stage_slot<TYPE, XS>();
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int rtl = warp / a.ks, kp = warp % a.ks;
  // Shared matrix: the entry groups of a row tile are adjacent CTAs, so that they run together and all but
  // the first read the tile's weights from L2 (B > 8 reads the matrix from DRAM about once, not B / 8 times).
  // Grouped experts: the group table was written before split_x ran (stream order), so it is read before
  // griddepcontrol.wait; a CTA past the step's groups does nothing (the grid is sized for the most groups).
  int2 grp = make_int2(0, 0);  // (expert, first slot); the end slot is read again after the loop
  if (a.groups) {
    if ((int)blockIdx.y >= *a.n_groups) return;
    grp = *reinterpret_cast<const int2*>(a.groups + blockIdx.y);
  }
  const int64_t tb = a.groups ? (int64_t)blockIdx.x : a.shared ? (int64_t)blockIdx.x / a.ny : (int64_t)blockIdx.x;
  const int64_t yg = a.shared ? (int64_t)blockIdx.x % a.ny : (int64_t)blockIdx.y;
  const int64_t tile = tb * a.rt + rtl;
  const bool tile_ok = tile * 16 < a.n_rows;
  const int64_t e0 = a.groups ? 2 * (int64_t)(grp.y >> 1) : a.shared ? yg * a.epp : yg;
  const int64_t mat = a.groups ? (int64_t)grp.x : a.ids ? (int64_t)a.ids[e0] : (a.shared ? 0 : e0 % a.w_count);
  const int64_t slot = a.shared ? e0 : (a.one_x ? 0 : e0);  // the x slot of column group 0's first token
  const int64_t left = a.groups ? 4 : a.batch - e0 < a.epp ? a.batch - e0 : a.epp;  // grouped: the CTA's slots are cut below
  const int ncg = a.shared ? (int)((left + kSlots - 1) / kSlots < NCG ? (left + kSlots - 1) / kSlots : NCG) : 1;
  const int64_t K16 = (int64_t)a.nb * 16;
  // This lane's B fragment of k-step 0: column g is term g % 2 of slot xs. A shared pass (and a grouped one)
  // reads its 4 slots from e0 on, column group c the 4 after (each lane's own address: a grouped pass may start
  // at slot 4 k + 2, in the middle of split_x's column group); an entry that is not a shared pass reads its one
  // slot in every column pair, so that every lane's two outputs are that slot's (an mma's output columns are
  // independent) and a warp's x load touches the slot's 2 sectors.
  const int64_t xs = a.shared ? e0 + (g >> 1) : slot;
  const int64_t xcol = 2 * (xs % kSlots) + (g & 1);
  const uint2* xg = a.xi + ((xs / kSlots) * K16 * 8 + xcol) * 4 + t;
  // Lane t's slot (the 2^-e of its output columns 2 t, 2 t + 1), and (Q4_K) its dmin term's B fragment.
  const int64_t ts = a.shared ? e0 + t : slot;
  const float* xfg = a.xf + (ts / kSlots) * (int64_t)a.nb * kSlots + ts % kSlots;
  const uint2* xmg = TYPE == kQ4_K ? a.xm + ((xs / kSlots) * (int64_t)a.nb * 8 + xcol) * 4 + t : nullptr;
  // Id -1 (w_alt) comes only with ids, which run one column group (NCG 1): the wider passes keep the plain
  // address (sm_90 SASS: the select cost their hot loop up to 22 instructions through register allocation).
  const uint8_t* wm = NCG == 1 && mat < 0 ? a.w_alt : a.w + mat * a.w_stride;
  const uint8_t* mat_end = wm + a.n_rows * a.row_bytes;
  const int64_t rl0 = min(tile * 16 + g, a.n_rows - 1), rl1 = min(tile * 16 + g + 8, a.n_rows - 1);
  const int b_lo = (int)((int64_t)a.nb * kp / a.ks), b_hi = (int)((int64_t)a.nb * (kp + 1) / a.ks);
  // Two chunks per warp: the second starts at b_mid (chunk j of 2 ks is [nb j / (2 ks), nb (j + 1) / (2 ks))); one
  // chunk: b_mid = b_lo, the first empty.
  const int b_mid = a.cpw == 2 ? (int)((int64_t)a.nb * (2 * kp + 1) / (2 * a.ks)) : b_lo;
  uint8_t* stg = smem + (size_t)warp * S::stages * 16 * kSlot;  // [stage][16 rows][slot]

  // Block b of the warp's 16 rows into stage st by 16-byte cp.async: lane l copies aligned word l % 16 of
  // rows l / 16, l / 16 + 2, ..., l / 16 + 14, so one instruction reads two rows' consecutive words (a few
  // cache lines). Lanes 2 r and 2 r + 1 taking the two halves of row r touched 32 lines per instruction, 8x the
  // ideal L1 wavefronts, and the shared-memory queue was the head's largest stall (ncu).
  // The matrix's last word by byte loads (nothing past the matrix is read, whatever the block alignment).
  const int cw = lane & 15, ch = lane >> 4;
  const bool full_tile = (tile + 1) * 16 <= a.n_rows;
  const uint8_t* row_ch = wm + min(tile * 16 + ch, a.n_rows - 1) * a.row_bytes;
  const uint8_t* row_last = wm + min(tile * 16 + 15, a.n_rows - 1) * a.row_bytes;
  uint8_t* slot_ch = stg + (size_t)ch * kSlot + 16 * cw;
  auto align16 = [](const uint8_t* p) {
    return reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(p) & ~(uintptr_t)15);
  };
  auto issue = [&](int b, int st) {
    if (cw >= S::words) return;
    uint8_t* d0 = slot_ch + (size_t)st * 16 * kSlot;
    const int64_t bo = (int64_t)b * S::ts;
    // Q4_K: rows (nb x 144 bytes) and blocks start 16-byte aligned, as the matrix does, and a block's 9 words
    // are its own: a full tile takes them without the alignment arithmetic or the end test.
    if constexpr (TYPE == kQ4_K) {
      if (full_tile) {
        const uint8_t* src = row_ch + bo + 16 * cw;
#pragma unroll
        for (int i = 0; i < 8; ++i) cp_async_16(smem_addr(d0 + (size_t)2 * i * kSlot), src + 2 * i * a.row_bytes, 16);
        return;
      }
    }
    // The usual case, one test per block: all 16 rows exist and the last one's words lie inside the matrix
    // (rows ascend, so every other row's do too). A word past a block's end lands in the slot's headroom.
    if (full_tile && mat_end - align16(row_last + bo) >= 16 * S::words) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        cp_async_16(smem_addr(d0 + (size_t)2 * i * kSlot), align16(row_ch + 2 * i * a.row_bytes + bo) + 16 * cw, 16);
      return;
    }
#pragma unroll 1
    for (int i = 0; i < 8; ++i) {
      const uint8_t* src = wm + min(tile * 16 + 2 * i + ch, a.n_rows - 1) * a.row_bytes + bo;
      const uint8_t* w0 = align16(src);
      if (cw >= (int)((src + S::ts - w0 + 15) >> 4)) continue;
      const uint8_t* p = w0 + 16 * cw;
      uint8_t* d = d0 + (size_t)2 * i * kSlot;
      if (mat_end - p >= 16) {
        cp_async_16(smem_addr(d), p, 16);
      } else {
        for (int q = 0; q < 16; ++q) d[q] = p + q < mat_end ? p[q] : (uint8_t)0;
      }
    }
  };

  // Rows g and g + 8 of lane t's slot in each column group; first: the first chunk's sums when the warp has two.
  float acc[NCG][2], first[NCG][2];
#pragma unroll
  for (int c = 0; c < NCG; ++c) acc[c][0] = acc[c][1] = first[c][0] = first[c][1] = 0.f;
  if constexpr (XS) {
    // The x stages, after the warps' weight stages: per K part kp [2 stages][NCG][16 k-steps][32 lanes] uint2, lane
    // l's B fragment of a k-step entry l (columns 2 j, 2 j + 1: slot e0 + j of the pass, whatever split_x's column
    // group holds it: a grouped pass may start at slot 4 k + 2). The rt warps of a K part stream the same blocks
    // and copy their part of the next block's x, also a warp without rows (the grid's last CTA); they meet at a
    // named barrier per part (1 + kp; the whole CTA where K is not split).
    uint2* xst = reinterpret_cast<uint2*>(smem + smem_bytes<TYPE, true>(W)) + (size_t)kp * 2 * NCG * 512;
    // A part's 64 NCG threads (rt = 2 NCG: gemv_mma_cta) copy a block's NCG x 256 16-byte chunks, 4 each: thread pt
    // column j, half h, k-step u0 (+ 4 i for one group), or group i (kMaxCg groups: a pass from a multiple of 4 slots).
    const int pt = rtl * 32 + lane, part_threads = 32 * a.rt;
    const int j0 = (pt >> 1) & 7, h0 = pt & 1, u0 = (pt >> 4) & 15;
    const int64_t sl0 = e0 + (j0 >> 1), col0 = 2 * (sl0 % kSlots) + (j0 & 1);
    const uint2* xsrc = a.xi + (((sl0 / kSlots) * K16 + u0) * 8 + col0) * 4 + h0 * 2;
    const int64_t src_step = NCG == 1 ? 4 * 32 : K16 * 32;
    const int dst0 = u0 * 32 + j0 * 4 + h0 * 2, dst_step = NCG == 1 ? 4 * 32 : 512;
    auto issue_x = [&](int b, int st) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        cp_async_16(smem_addr(xst + st * NCG * 512 + dst0 + i * dst_step), xsrc + (int64_t)b * 512 + i * src_step, 16);
    };
    // Barrier ids as immediates (a register id makes ptxas reserve all 16 of the CTA's barriers).
    auto part_barrier = [&] {
      switch (kp) {
        case 0: asm volatile("bar.sync 1, %0;\n" ::"r"(part_threads) : "memory"); break;
        case 1: asm volatile("bar.sync 2, %0;\n" ::"r"(part_threads) : "memory"); break;
        case 2: asm volatile("bar.sync 3, %0;\n" ::"r"(part_threads) : "memory"); break;
        default: asm volatile("bar.sync 4, %0;\n" ::"r"(part_threads) : "memory"); break;
      }
    };
    if (tile_ok && b_lo < b_hi) issue(b_lo, 0);
    pdl_wait();  // x is split_x's output
    if (b_lo < b_hi) issue_x(b_lo, 0);
    cp_async_commit();
    int st = 0, b = b_lo;
    // Two chunks per warp (grouped experts of up to 128 row tiles) as in the loop below: [b_lo, b_mid), [b_mid, b_hi).
#pragma unroll 1
    for (int part = NCG <= 2 ? 0 : 1; part < 2; ++part) {
#pragma unroll 1
      for (const int b_end = part == 0 ? b_mid : b_hi; b < b_end; ++b) {
        cp_async_wait<0>();
        // Every thread's part of block b's x has landed, and every warp of the K part is done with block b - 1,
        // whose stages (weights and x) are refilled now: one barrier per block.
        part_barrier();
        if (b + 1 < b_hi) {
          if (tile_ok) issue(b + 1, st ^ 1);
          issue_x(b + 1, st ^ 1);
        }
        cp_async_commit();
        if (tile_ok) {
          const uintptr_t o0 = TYPE == kQ4_K ? 0 : reinterpret_cast<uintptr_t>(wm + rl0 * a.row_bytes + (int64_t)b * S::ts) & 15;
          const uintptr_t o1 = TYPE == kQ4_K ? 0 : reinterpret_cast<uintptr_t>(wm + rl1 * a.row_bytes + (int64_t)b * S::ts) & 15;
          const uint8_t* s0 = stg + ((size_t)st * 16 + g) * kSlot + o0;
          const uint8_t* s1 = stg + ((size_t)st * 16 + g + 8) * kSlot + o1;
          const uint2* xb = xst + st * NCG * 512 + lane;
          if constexpr (TYPE == kQ6_K)
            block_q6k<NCG, true>(s0, s1, t, xb, 512, xfg + (int64_t)b * kSlots, (int64_t)a.nb * kSlots, acc);
          else
            block_q4k<NCG, true>(s0, s1, b, t, xb, 512, xfg, (int64_t)a.nb * kSlots, xmg, (int64_t)a.nb * 32, acc);
        }
        st ^= 1;
      }
      if (NCG <= 2 && part == 0) {
#pragma unroll
        for (int c = 0; c < NCG; ++c)
#pragma unroll
          for (int i = 0; i < 2; ++i) first[c][i] = acc[c][i], acc[c][i] = 0.f;
      }
    }
  } else if (tile_ok) {
    // XW: the warp's x stages. The pass's live slot: its two columns of each k-step (64 bytes: 4 pieces of 16) and of
    // the block's dmin term; lane l copies pieces l and l + 32 of the block (k-step p / 4, quarter p % 4), lanes 0-3
    // the dmin term's. Every lane then reads its column g % 2 of that slot: the live columns' bits are those of the
    // loads from global memory, and the other columns' outputs (a shared pass's slots past the batch) are not written.
    uint2* const xw = XW ? reinterpret_cast<uint2*>(smem + smem_bytes<TYPE, false>(W)) + (size_t)warp * S::stages * kXwStage : nullptr;
    const int64_t xs1 = a.shared ? e0 : slot;
    // Piece l + 32 is piece l's k-step + 8: 256 uint2 on in split_x's layout, 64 in the stage.
    const uint2* xsrc = a.xi + (xs1 / kSlots) * K16 * 32 + 2 * (xs1 % kSlots) * 4 + (lane >> 2) * 32 + (lane & 3) * 2;
    const uint2* msrc = XW ? a.xm + (xs1 / kSlots) * (int64_t)a.nb * 32 + 2 * (xs1 % kSlots) * 4 + lane * 2 : nullptr;
    const uint32_t xdst = XW ? smem_addr(xw + (lane >> 2) * 8 + (lane & 3) * 2) : 0, mdst = XW ? smem_addr(xw + 128 + lane * 2) : 0;
    auto issue_xw = [&](int b, int st) {
      const uint32_t so = (uint32_t)(st * kXwStage * sizeof(uint2));
      const uint2* src = xsrc + (int64_t)b * 512;
      cp_async_16(xdst + so, src, 16);
      cp_async_16(xdst + so + 64 * sizeof(uint2), src + 256, 16);
      if (lane < 4) cp_async_16(mdst + so, msrc + (int64_t)b * 32, 16);
    };
#pragma unroll
    for (int s = 0; s < S::stages - 1; ++s) {
      if (b_lo + s < b_hi) issue(b_lo + s, s);
      cp_async_commit();
    }
    // Launched as a programmatic dependent of the split_x kernel: the weights' first stages are in flight
    // while it runs; x's terms are read only after it has finished (a no-op without the dependency).
    pdl_wait();
    if constexpr (XW) {  // one more group, complete by the loop's first wait (two stages)
#pragma unroll
      for (int s = 0; s < S::stages - 1; ++s)
        if (b_lo + s < b_hi) issue_xw(b_lo + s, s);
      cp_async_commit();
    }
    int st = 0;  // (b - b_lo) % stages, kept by a counter (a modulo by 3 stages was 4 instructions per use)
    int b = b_lo;
    // Two chunks per warp (the experts by id and grouped experts: one column group): [b_lo, b_mid) then
    // [b_mid, b_hi), the first's sums kept in `first`. A loop per chunk, not a test per block: a test per block cost
    // the Q6_K loop ~45 instructions (SASS).
#pragma unroll 1
    for (int part = NCG <= 2 ? 0 : 1; part < 2; ++part) {
      for (const int b_end = part == 0 ? b_mid : b_hi; b < b_end; ++b) {
        const int nx = b + S::stages - 1;
        if (nx < b_hi) {
          issue(nx, st == 0 ? S::stages - 1 : st - 1);
          if constexpr (XW) issue_xw(nx, st == 0 ? S::stages - 1 : st - 1);
        }
        cp_async_commit();  // possibly empty: keeps the wait count uniform
        cp_async_wait<S::stages - 1>();
        __syncwarp();
        // A row's block at the offset it had in its 16-byte word (always 0 for Q4_K).
        const uintptr_t o0 = TYPE == kQ4_K ? 0 : reinterpret_cast<uintptr_t>(wm + rl0 * a.row_bytes + (int64_t)b * S::ts) & 15;
        const uintptr_t o1 = TYPE == kQ4_K ? 0 : reinterpret_cast<uintptr_t>(wm + rl1 * a.row_bytes + (int64_t)b * S::ts) & 15;
        const uint8_t* s0 = stg + ((size_t)st * 16 + g) * kSlot + o0;
        const uint8_t* s1 = stg + ((size_t)st * 16 + g + 8) * kSlot + o1;
        if constexpr (XW) {
          const uint2* xb = xw + st * kXwStage + (g & 1) * 4 + t;
          block_q4k<NCG, true, 8, true>(s0, s1, b, t, xb, 0, xfg, (int64_t)a.nb * kSlots, xb + 128, 0, acc);
        } else if constexpr (TYPE == kQ6_K) {
          block_q6k<NCG>(s0, s1, t, xg + (int64_t)b * 16 * 32, K16 * 32, xfg + (int64_t)b * kSlots, (int64_t)a.nb * kSlots, acc);
        } else {
          block_q4k<NCG>(s0, s1, b, t, xg + (int64_t)b * 16 * 32, K16 * 32, xfg, (int64_t)a.nb * kSlots, xmg, (int64_t)a.nb * 32, acc);
        }
        __syncwarp();  // the stage is refilled `stages` blocks on
        st = st + 1 == S::stages ? 0 : st + 1;
      }
      if (NCG <= 2 && part == 0) {
#pragma unroll
        for (int c = 0; c < NCG; ++c)
#pragma unroll
          for (int i = 0; i < 2; ++i) first[c][i] = acc[c][i], acc[c][i] = 0.f;
      }
    }
  }
  cp_async_wait<0>();

  // The ks warps of a row tile: chunk sums added in the order of MmaArgs::cpw, by the first warp of the tile,
  // whose lane t writes rows g and g + 8 of its slot in each column group (lane 0's slot for an entry that is not
  // a shared pass: every lane holds it).
  static_assert(W * NCG * 2 * 32 * sizeof(float) <= smem_bytes<TYPE, XS>(W), "red fits the staging memory");
  float* red = reinterpret_cast<float*>(smem);  // [W][NCG][2][32]
  __syncthreads();  // the staging memory becomes red
#pragma unroll
  for (int c = 0; c < NCG; ++c)
#pragma unroll
    for (int i = 0; i < 2; ++i)
      red[((warp * NCG + c) * 2 + i) * 32 + lane] = NCG <= 2 && a.cpw == 2 ? __fadd_rn(first[c][i], acc[c][i]) : acc[c][i];
  __syncthreads();
  if (kp != 0 || !tile_ok || (!a.shared && t != 0)) return;
  // The slots this CTA writes (grouped: its group's).
  int64_t e_lo = 0, e_hi = a.batch;
  if (a.groups) {
    const int4 gr = a.groups[blockIdx.y];
    e_lo = gr.y, e_hi = gr.z;
  }
  constexpr int kStride = NCG * 2 * 32;  // warp k's copy at r[k * kStride]
#pragma unroll
  for (int c = 0; c < NCG; ++c) {
    if (c >= ncg) break;
    const int64_t e = a.shared ? e0 + kSlots * c + t : e0;
    if (e < e_lo || e >= e_hi) continue;
    float* yr = a.y + (a.out_rows ? (int64_t)a.out_rows[e] : e) * a.y_stride;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t rowg = tile * 16 + g + 8 * i;
      if (rowg >= a.n_rows) continue;
      const float* r = red + ((warp * NCG + c) * 2 + i) * 32 + lane;
      const int step = a.pair_red ? 2 : 1;
      float v = a.pair_red ? __fadd_rn(r[0], r[kStride]) : r[0];
      for (int k = step; k < a.ks; k += step)
        v = __fadd_rn(v, a.pair_red ? __fadd_rn(r[k * kStride], r[(k + 1) * kStride]) : r[k * kStride]);
      yr[rowg] = v;
    }
  }
}

template <int TYPE, int NCG, int W, bool XS = false, bool XW = false>
void launch_w(const MmaArgs& a, dim3 grid) {
  constexpr size_t smem = kernel_smem<TYPE, NCG, W, XS, XW>();
  static_assert(smem <= 99 * 1024, "at most 99 KB of shared memory per CTA (sm_120)");
  static bool attr[64] = {};  // per instantiation and device
  const int dev = current_device();
  if (dev >= 64) throw CudaError("gemv_mma: device ordinal beyond 63");
  if (!attr[dev]) {
    MLACONF_CUDA_CHECK(cudaFuncSetAttribute(gemv_mma_kernel<TYPE, NCG, W, XS, XW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem));
    attr[dev] = true;
  }
  // A programmatic dependent launch (sm_90 and later): the CTAs start while split_x runs and stage their first
  // weight blocks before griddepcontrol.wait (H200: 1-2.5 us less per call, docs/perf/gemv-blocks.md).
  launch_dependent(gemv_mma_kernel<TYPE, NCG, W, XS, XW>, grid, dim3(32 * W), smem, a);
  MLACONF_CUDA_LAUNCH_CHECK("gemv_mma_kernel");
}
template <int TYPE, int NCG>
void launch(const MmaArgs& a, dim3 grid, bool xs, bool xw) {
  if constexpr (NCG == kMaxCg) {
    if (xs) {  // gemv_mma_cta: CTAs of 8 warps, K not split, passes of 16 x
      launch_w<TYPE, NCG, kWarps, true>(a, grid);
      return;
    }
  }
  if constexpr (NCG == 1) {
    if constexpr (TYPE == kQ4_K) {
      if (xw) {  // a pass of one live slot: x staged per warp
        if (a.rt * a.ks == kWarpsSmall) launch_w<TYPE, 1, kWarpsSmall, false, true>(a, grid);
        else launch_w<TYPE, 1, kWarps, false, true>(a, grid);
        return;
      }
    }
    if (xs) {  // gemv_mma_cta: grouped experts, CTAs of 2 row tiles
      if (a.rt * a.ks == kWarpsSmall) launch_w<TYPE, 1, kWarpsSmall, true>(a, grid);
      else launch_w<TYPE, 1, kWarps, true>(a, grid);
      return;
    }
  }
  if (a.rt * a.ks == kWarpsSmall)
    launch_w<TYPE, NCG, kWarpsSmall>(a, grid);
  else
    launch_w<TYPE, NCG, kWarps>(a, grid);
}
// The kernel of tcg column groups (1, 2 or kMaxCg).
template <int TYPE>
void launch_cg(int tcg, const MmaArgs& a, dim3 grid, bool xs, bool xw) {
  if (tcg == 1) launch<TYPE, 1>(a, grid, xs, xw);
  else if (tcg == 2) launch<TYPE, 2>(a, grid, false, false);
  else launch<TYPE, kMaxCg>(a, grid, xs, false);
}

}  // namespace

bool gemv_mma_by_default(GgmlType t, int64_t n_rows, int64_t ncols) {
  return (t == GgmlType::Q4_K || t == GgmlType::Q6_K) && n_rows >= 1024 && ncols >= 2048;
}

MmaCta gemv_mma_cta(int64_t n_rows, int64_t ncols, int64_t batch, bool shared, bool grouped) {
  // Row tiles per CTA and the split of K. At least ~8 warps per SM of a 132-SM device, K split over up to 8
  // warps. Up to 128 tiles (2048 rows: an expert's gate and up, q_a) the order of sums is fixed (8 chunks,
  // split8), so the CTA's shape is free: the experts split K over 4 warps in CTAs of 4 (one tile each: 22 %
  // faster at B = 8 and 32 than 8 warps, each warp streaming 6 blocks instead of 3), one matrix over 8 warps in
  // CTAs of 8 (2048 x 6144 at B = 1 13.7 -> 12.6 us, at B = 8 29.8 -> 22.7 us: it has only 128 CTAs for 132
  // SMs). Grouped experts as the experts by id (the grid has a CTA row per group, so filling the SMs is not the
  // question, and one matrix's 8 warps left each warp 3 of the gate's 24 blocks). Beyond 128 tiles the split is
  // the order of sums, so a function of the shape alone. (H200 measurements: docs/perf/h200-2026-12-02.md.)
  const int64_t tiles = (n_rows + 15) / 16, nb = ncols / 256;
  int rt = tiles >= 132 * 8 ? 8 : tiles >= 132 * 4 ? 4 : tiles >= 132 * 2 ? 2 : 1;
  int ks = tiles > 128 ? kWarps / rt : shared && !grouped ? kWarps : kWarpsSmall;
  // Beyond 128 tiles, at least 4 blocks per warp where halving the split leaves a CTA of 4 warps or more (the
  // experts' down, 6144 x 2048, 2 blocks per warp -> 4 in CTAs of 4 warps: 34.2 -> 29.3 us for 8).
  while (tiles > 128 && ks > 1 && nb / ks < 4 && rt * ks / 2 >= kWarpsSmall) ks /= 2;
  // A shared matrix's column groups per pass (4 x each): 2 (8 x), or 4 (16 x) by the rules below. With each warp
  // loading x, passes of 16 x issue a third fewer instructions but stall on x's loads (ncu, the head at 64 x:
  // 4.6 warps waiting on the long scoreboard per issue, 41 % issue-active: 2.49 ms against 2.08 for passes of 8 x).
  // x through shared memory (xs): where K is not split (ks = 1, the head) the CTA stages x once for its 8 warps,
  // which then read it by LDS, so that passes of 16 x no longer wait on its loads. From 9 x on (a pass of 3-4
  // column groups): at 8 x the passes of 2 groups in CTAs of 4 (the balance below) were faster (the head at 8 x:
  // 304.9 us against 340.1 in CTAs of 8 with x staged).
  const bool xs = shared && !grouped && ks == 1 && rt == kWarps && batch > 2 * kSlots;
  // Grouped experts in CTAs of 2 row tiles (beyond 128 tiles: the down, 6144 x 2048, K over 2 warps) share x through
  // shared memory between the 2 warps of each K part (64 tokens: the down 753.0 -> 717.3 us). Not the gate / up (up
  // to 128 tiles, one tile per CTA of 4 warps): made CTAs of 2 tiles (8 warps) to share x, they measured 724.7 ->
  // 824.6 us.
  const bool xs_grouped = grouped && tiles > 128 && rt == 2 && rt * ks <= kWarps;
  // Passes of 16 x from 33 x on where each warp streams at least 8 blocks: the decode step at 64 x measured +1.5 %
  // with them (attn_output, the dense FFN, q_b), at 32 x -2.1 %, at 16 x -0.9 %.
  const bool wide = batch > 32;
  const int cg = xs || (shared && !grouped && wide && nb / ks >= 8) ? kMaxCg : kMaxCgNarrow;
  // The CTA's size by balance: ks fixes the order of sums, but a row tile's ks warps may sit in CTAs of 4 or 8
  // warps. Where the grid takes several rounds of resident CTAs (2 of 8 warps per SM), the last round's share
  // sets the tail: with CTAs spread evenly the busiest SM runs ceil(CTAs / SMs) x warps per CTA, and CTAs of 4
  // are taken where that is less (the head, 154880 rows: 1210 CTAs of 8 warps, 80 warp-shares on the busiest SM
  // against 76 as 2420 CTAs of 4: 262.1 -> 245.2 us at B = 1, -3 % at B = 8). Not in one round (attn_output, 192
  // CTAs for 264 places): there CTAs of 4 measured level or 2 % slower. The same bits either way (a row's order
  // of sums depends on ks alone).
  if (tiles > 128 && !grouped && !xs && rt * ks == kWarps && rt > 1) {
    const int64_t per_row = shared ? (batch + kSlots * cg - 1) / (kSlots * cg) : batch, sms = device_sm_count();
    auto busiest = [&](int r) { return (int64_t)ceil_div((int64_t)ceil_div(tiles, r) * per_row, sms) * r * ks; };
    const bool rounds = (int64_t)ceil_div(tiles, rt) * per_row > sms * (16 / kWarps);
    if (rounds && busiest(rt / 2) < busiest(rt)) rt /= 2;
  }
  return {rt, ks, cg, xs || xs_grouped};
}

// x staged per warp with its weights: a pass of one live x slot (the experts by id; one matrix at one x) otherwise
// has each lane load x's fragments inside each block (16 LDG.64 per lane, from L2 at one matrix's 1 CTA per SM),
// and a shared pass at one x also its 3 slots of padding. Such a pass has one column group and no x through shared
// memory per CTA (that needs more than 8 x, or grouped experts). Not Q6_K: its staged loop took 43 more instructions
// per block (656 -> 699, sm_90) and attn_output's 6144 x 16384 ran 38.6-39.3 -> 41.1-42.0 us in the B = 1 step.
bool gemv_mma_xwarp_pass(GgmlType t, int64_t batch, bool shared, bool grouped) {
  return t == GgmlType::Q4_K && !grouped && (!shared || batch == 1);
}

bool gemv_mma(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const int32_t* d_ids, int64_t w_count,
              int64_t w_stride, const float* d_x, int64_t x_stride, float* d_y, int64_t y_stride, int64_t batch,
              const void* d_w_alt, const ExpertGroupsArg* grouped) {
  if (t != GgmlType::Q4_K && t != GgmlType::Q6_K) return false;
  if (d_w_alt && (!d_ids || reinterpret_cast<uintptr_t>(d_w_alt) % 16)) return false;
  if (grouped && (d_ids || d_w_alt || x_stride <= 0)) return false;
  if (n_rows <= 0 || batch <= 0 || w_count <= 0 || ncols % 256 || ncols / 256 > (1 << 24)) return false;
  if ((reinterpret_cast<uintptr_t>(d_w) % 16) || w_stride % 16 || x_stride < 0) return false;
  // Grouped experts run shared passes (rows, split and order of sums as one matrix: the same bits).
  const bool shared = grouped || (!d_ids && (w_stride == 0 || w_count == 1));
  if ((!shared || grouped) && batch > 65535) return false;
  const int64_t K = ncols, nb = ncols / 256;
  // x slots: a shared matrix gives every entry its own (even when x_stride is 0); experts at one token
  // (x_stride 0) read one.
  const bool one_x = !shared && x_stride == 0;
  const MmaCta cta = gemv_mma_cta(n_rows, ncols, batch, shared, grouped != nullptr);
  const int cap = cta.cg;
  const int64_t ntok = one_x ? 1 : batch, ny = shared ? (batch + kSlots * cap - 1) / (kSlots * cap) : 0;
  // Column groups per pass (NCG). Grouped: 1 (4 slots), the pass of an expert picked by 2-3 tokens (B = 64 of
  // GLM-5's 256 experts, top 8: 2 on average).
  const int ncg = grouped ? kGroupedCg : shared ? (int)std::min<int64_t>(cap, (batch + kSlots - 1) / kSlots) : 1;
  // The kernel's NCG (its template): 1, 2 or 4 column groups, the fewest that hold ncg.
  const int tcg = ncg <= 2 ? ncg : kMaxCg;
  // x staging copies 4 chunks per thread of a K part: 2 row tiles per column group (the head: 8 tiles, 4 groups;
  // grouped experts: 2 tiles, 1 group).
  if (cta.xs && cta.rt != 2 * tcg) throw CudaError("gemv_mma: x staging with " + std::to_string(cta.rt) + " row tiles and " +
                                                   std::to_string(tcg) + " column groups");
  // Column groups hold 4 slots each. A shared pass reads the template's NCG groups from cap y on, so past the
  // last entry they are padded with zero x (the kernel never branches around an mma; sized by ncg instead, one pass
  // would read one group past the split's at B = 5 and 6); a grouped pass 4 slots from any even slot, so up to
  // slot ntok + 2.
  const int64_t groups = grouped ? (ntok + 2) / kSlots + 1 : shared ? (ny == 1 ? tcg : cap * ny) : (ntok + kSlots - 1) / kSlots;
  if (kSlots * groups > 65535 || (shared && (n_rows + 15) / 16 * ny > 0x7fffffff)) return false;
  void* xi = scratch(5, (size_t)groups * K * 16);
  // xf ([groups][nb][4] fp32), then for Q4_K xm ([groups][nb][8][16] bf16).
  const bool q4k = t == GgmlType::Q4_K;
  auto* xf = static_cast<float*>(scratch(6, (size_t)groups * nb * (16 + (q4k ? 256 : 0))));
  auto* xm = q4k ? reinterpret_cast<__nv_bfloat16*>(xf + groups * nb * kSlots) : nullptr;
  const bool hi_only = active_fault() == Fault::GemvXBf16;
  // Chained: one matrix only. The GEMV reads expert ids and the group table before it waits, and the kernel
  // before the split may be the one writing them (route, group_pairs): those splits wait for it in stream order.
  const bool chain = !d_ids && !grouped;
  split_x(d_x, x_stride, K, ntok, groups, static_cast<__half*>(xi), xf, xm, hi_only, chain);

  const int64_t tiles = (n_rows + 15) / 16;
  const int rt = cta.rt, ks = cta.ks;
  const bool split8 = tiles <= 128;  // K as 8 chunks added in pairs (MmaArgs::cpw)
  const int cpw = split8 && ks == kWarpsSmall ? 2 : 1;  // the experts (by id: NCG 1; grouped: 2)
  const bool pair_red = split8 && ks == kWarps;
  MmaArgs a{static_cast<const uint8_t*>(d_w), n_rows, row_bytes(t, ncols), (int)nb, rt, ks, cpw, pair_red, d_ids, w_count,
            w_stride, batch, shared, kSlots * cap, (int)ny, one_x, static_cast<const uint8_t*>(d_w_alt),
            grouped ? reinterpret_cast<const int4*>(grouped->groups) : nullptr, grouped ? grouped->n_groups : nullptr,
            grouped ? grouped->out_rows : nullptr, static_cast<const uint2*>(xi), xf,
            reinterpret_cast<const uint2*>(xm), d_y, y_stride};
  // Grouped: a CTA row per possible group (at most one per slot); those past the step's count return at once.
  const dim3 grid = grouped ? dim3(ceil_div(tiles, rt), (unsigned)batch)
                    : shared ? dim3((unsigned)(ceil_div(tiles, rt) * ny))
                             : dim3(ceil_div(tiles, rt), (unsigned)batch);
  // x staged per warp with its weights (gemv_mma_xwarp_pass).
  const bool xw = gemv_mma_xwarp_pass(t, batch, shared, grouped != nullptr);
  if (xw && (tcg != 1 || cta.xs)) throw CudaError("gemv_mma: x staged per warp in a pass of " + std::to_string(tcg) + " column groups");
  if (t == GgmlType::Q6_K) launch_cg<kQ6_K>(tcg, a, grid, cta.xs, xw);
  else launch_cg<kQ4_K>(tcg, a, grid, cta.xs, xw);
  return true;
}

}  // namespace mlaconf::cuda
