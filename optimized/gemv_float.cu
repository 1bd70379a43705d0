// mlaconf optimized: GEMV on unquantized weights (F32, F16, BF16), the MoE router's 6144 x 256 F32
// matrix above all (the old per-element kernel read it at ~50 GB/s).
//
// Why this shape: a router matrix has few rows and long ones, so one warp per row leaves most SMs idle.
// Here a 256-thread CTA splits each row's columns over all its threads in 16-byte chunks (4 floats or 8
// halves): thread tid takes chunks tid, tid + 256, ... and sums them in that order with fmaf, then the
// 256 partial sums are reduced by a fixed tree (xor shuffles in each warp, then warps 0..7 in order).
// That order depends only on (type, ncols), never on how many rows (RPC) or batch entries (NB) a CTA
// carries nor on the pointers' alignment: RPC and NB are picked from the launch to fill the device and
// share loads (RPC rows share each x chunk, NB entries of one matrix share each weight chunk), and a
// misaligned operand only swaps the 16-byte loads for scalar ones of the same values. So batched decode
// gets the bits of decoding alone.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"
#include "optimized/gemv_float.cuh"

namespace mlaconf::cuda {
namespace {

constexpr int kThreads = 256;

enum class Ft { F32, F16, BF16 };

template <Ft T>
struct Elt;
template <>
struct Elt<Ft::F32> {
  static constexpr int kPerChunk = 4;
  __device__ static float at(const uint8_t* row, int64_t c) { return __ldg(reinterpret_cast<const float*>(row) + c); }
  __device__ static void unpack(uint4 u, float* v) {
    v[0] = __uint_as_float(u.x), v[1] = __uint_as_float(u.y), v[2] = __uint_as_float(u.z), v[3] = __uint_as_float(u.w);
  }
};
template <>
struct Elt<Ft::F16> {
  static constexpr int kPerChunk = 8;
  __device__ static float at(const uint8_t* row, int64_t c) { return __half2float(__ldg(reinterpret_cast<const __half*>(row) + c)); }
  __device__ static void unpack(uint4 u, float* v) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __half2float(__ushort_as_half((unsigned short)(w[i] & 0xFFFFu)));
      v[2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(w[i] >> 16)));
    }
  }
};
template <>
struct Elt<Ft::BF16> {
  static constexpr int kPerChunk = 8;
  // bf16 -> f32 is the top half of the float: exact.
  __device__ static float at(const uint8_t* row, int64_t c) {
    return __uint_as_float((uint32_t)__ldg(reinterpret_cast<const unsigned short*>(row) + c) << 16);
  }
  __device__ static void unpack(uint4 u, float* v) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  }
};

struct Args {
  const uint8_t* w;
  int64_t n_rows, ncols, row_bytes;
  const int32_t* ids;
  int64_t w_count, w_stride;
  const float* x;
  int64_t x_stride;
  float* y;
  int64_t y_stride, batch;
  bool batch_major;  // grid (entry groups, row blocks): the CTAs reading one row block run together
};

// CTA: rows [rb * RPC, +RPC) x batch entries [eb * NB, +NB) (NB > 1 only when they share one matrix).
// VEC: every operand 16-byte aligned, so full chunks are read with 16-byte loads; the partial last chunk
// (ncols % kPerChunk) is always read element by element, in both variants.
template <Ft T, int RPC, int NB, bool VEC>
__global__ void __launch_bounds__(kThreads) gemv_float_kernel(Args a) {
  using E = Elt<T>;
  constexpr int V = E::kPerChunk;
  const int tid = threadIdx.x;
  const int64_t rb = a.batch_major ? blockIdx.y : blockIdx.x, eb = a.batch_major ? blockIdx.x : blockIdx.y;
  const int64_t row0 = rb * RPC, b0 = eb * NB;
  const uint8_t* wr[RPC];
  const float* xb[NB];
  {
    const int64_t mat = a.ids ? (int64_t)a.ids[b0] : (a.w_count > 0 ? b0 % a.w_count : 0);
#pragma unroll
    for (int r = 0; r < RPC; ++r) wr[r] = a.w + mat * a.w_stride + min(row0 + r, a.n_rows - 1) * a.row_bytes;
#pragma unroll
    for (int n = 0; n < NB; ++n) xb[n] = a.x + min(b0 + n, a.batch - 1) * a.x_stride;
  }
  float acc[RPC][NB];
#pragma unroll
  for (int r = 0; r < RPC; ++r)
#pragma unroll
    for (int n = 0; n < NB; ++n) acc[r][n] = 0.f;

  const int64_t full = a.ncols / V;  // whole chunks
  // Two chunks per step keep 2 * (RPC + NB) independent 16-byte loads in flight per thread.
  constexpr int U = (RPC + NB) <= 2 ? 4 : 2;
  int64_t j = tid;
  for (; j + (U - 1) * kThreads < full; j += U * kThreads) {
    float wv[U][RPC][V], xv[U][NB][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c0 = (j + u * kThreads) * V;
#pragma unroll
      for (int r = 0; r < RPC; ++r) {
        if constexpr (VEC) E::unpack(__ldg(reinterpret_cast<const uint4*>(wr[r]) + (j + u * kThreads)), wv[u][r]);
        else
#pragma unroll
          for (int i = 0; i < V; ++i) wv[u][r][i] = E::at(wr[r], c0 + i);
      }
#pragma unroll
      for (int n = 0; n < NB; ++n)
#pragma unroll
        for (int i = 0; i < V; i += 4) {
          if constexpr (VEC) {
            const float4 f = __ldg(reinterpret_cast<const float4*>(xb[n] + c0 + i));
            xv[u][n][i] = f.x, xv[u][n][i + 1] = f.y, xv[u][n][i + 2] = f.z, xv[u][n][i + 3] = f.w;
          } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) xv[u][n][i + k] = __ldg(xb[n] + c0 + i + k);
          }
        }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < RPC; ++r)
#pragma unroll
        for (int n = 0; n < NB; ++n)
#pragma unroll
          for (int i = 0; i < V; ++i) acc[r][n] = fmaf(wv[u][r][i], xv[u][n][i], acc[r][n]);
  }
  // The remaining whole chunks one at a time, then the partial chunk: the same per-thread order.
  for (; j <= full; j += kThreads) {
    const int64_t c0 = j * V;
    const int cnt = j < full ? V : (int)(a.ncols - c0);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if (i >= cnt) break;
#pragma unroll
      for (int r = 0; r < RPC; ++r) {
        const float wvi = E::at(wr[r], c0 + i);
#pragma unroll
        for (int n = 0; n < NB; ++n) acc[r][n] = fmaf(wvi, __ldg(xb[n] + c0 + i), acc[r][n]);
      }
    }
  }

  __shared__ float red[kThreads / 32][RPC * NB];
  const int warp = tid >> 5, lane = tid & 31;
#pragma unroll
  for (int r = 0; r < RPC; ++r)
#pragma unroll
    for (int n = 0; n < NB; ++n) {
      float v = acc[r][n];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) red[warp][r * NB + n] = v;
    }
  __syncthreads();
  if (tid < RPC * NB) {
    const int r = tid / NB, n = tid % NB;
    const int64_t row = row0 + r, b = b0 + n;
    if (row < a.n_rows && b < a.batch) {
      float s = red[0][tid];
#pragma unroll
      for (int w = 1; w < kThreads / 32; ++w) s += red[w][tid];
      a.y[b * a.y_stride + row] = s;
    }
  }
}

template <Ft T, int RPC, int NB>
void launch(const Args& a, dim3 grid, bool vec) {
  if (vec) gemv_float_kernel<T, RPC, NB, true><<<grid, kThreads, 0, cur_stream()>>>(a);
  else gemv_float_kernel<T, RPC, NB, false><<<grid, kThreads, 0, cur_stream()>>>(a);
}

template <Ft T>
void dispatch(const Args& a, int rpc, int nb, dim3 grid, bool vec) {
  if (nb == 4) launch<T, 1, 4>(a, grid, vec);
  else if (nb == 2) launch<T, 1, 2>(a, grid, vec);
  else if (rpc == 4) launch<T, 4, 1>(a, grid, vec);
  else if (rpc == 2) launch<T, 2, 1>(a, grid, vec);
  else launch<T, 1, 1>(a, grid, vec);
}

}  // namespace

bool gemv_float(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const int32_t* d_ids, int64_t w_count,
                int64_t w_stride, const float* d_x, int64_t x_stride, float* d_y, int64_t y_stride, int64_t batch) {
  if (t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16) return false;
  if (n_rows <= 0 || ncols <= 0 || batch <= 0) return true;
  const int64_t esize = t == GgmlType::F32 ? 4 : 2;
  Args a{static_cast<const uint8_t*>(d_w), n_rows, ncols, ncols * esize, d_ids, w_count, w_stride, d_x, x_stride, d_y, y_stride,
         batch, true};
  const bool vec = reinterpret_cast<uintptr_t>(d_w) % 16 == 0 && a.row_bytes % 16 == 0 && (d_ids || w_count > 1 ? w_stride % 16 == 0 : true) &&
                   reinterpret_cast<uintptr_t>(d_x) % 16 == 0 && x_stride % 4 == 0;
  // Enough CTAs for two per SM where the shape allows: more rows per CTA only when rows are plenty;
  // NB entries per CTA only when all entries read one matrix (no ids, one matrix), each weight chunk then
  // loaded once for NB of them (the first from DRAM, the other groups' copies mostly from L2).
  const int64_t want = 2 * (int64_t)device_sm_count();
  const bool one_matrix = !d_ids && (w_stride == 0 || w_count <= 1);
  int rpc = 1, nb = 1;
  if (one_matrix && batch >= 4) nb = 4;
  else if (one_matrix && batch >= 2) nb = 2;
  else if (ceil_div(n_rows, 4) * batch >= want) rpc = 4;
  else if (ceil_div(n_rows, 2) * batch >= want) rpc = 2;
  const int64_t row_blocks = ceil_div(n_rows, rpc), entry_groups = ceil_div(batch, nb);
  a.batch_major = row_blocks <= 65535;
  if (!a.batch_major && entry_groups > 65535) throw InputError("cuda::gemv: shape too large for the float GEMV grid");
  const dim3 grid = a.batch_major ? dim3((unsigned)entry_groups, (unsigned)row_blocks) : dim3((unsigned)row_blocks, (unsigned)entry_groups);
  if (t == GgmlType::F32) dispatch<Ft::F32>(a, rpc, nb, grid, vec);
  else if (t == GgmlType::F16) dispatch<Ft::F16>(a, rpc, nb, grid, vec);
  else dispatch<Ft::BF16>(a, rpc, nb, grid, vec);
  MLACONF_CUDA_LAUNCH_CHECK("gemv_float_kernel");
  return true;
}

}  // namespace mlaconf::cuda
