// mlaconf optimized: dequantization kernels (ggml blocks -> f32 / f16), one thread per output value.
#include <cuda_fp16.h>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/dequant_elem.cuh"
#include "optimized/iq_grids.cuh"

namespace mlaconf::cuda {

bool can_dequantize(GgmlType t) {
  for (GgmlType w : weight_types())
    if (w == t) return true;
  return false;
}

static void check_args(GgmlType t, int64_t n, const char* who) {
  if (!can_dequantize(t)) throw InputError(std::string(who) + ": cannot dequantize type " + type_name(t));
  if (n < 0 || n % traits(t).block_size != 0)
    throw InputError(std::string(who) + ": " + std::to_string(n) + " values is not a multiple of the " + type_name(t) +
                     " block size " + std::to_string(traits(t).block_size));
}

template <class Out>
__device__ __forceinline__ void store(Out* p, float v);
template <>
__device__ __forceinline__ void store<float>(float* p, float v) { *p = v; }
template <>
__device__ __forceinline__ void store<__half>(__half* p, float v) { *p = __float2half_rn(v); }

template <class Out>
__global__ void dequant_kernel(int type, const uint8_t* __restrict__ src, int64_t n, int bs, int ts, Out* __restrict__ dst) {
  const IqGrids g = device_grids();
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t blk = e / bs;
    store(dst + e, dq_elem(type, src + blk * ts, (int)(e - blk * bs), g));
  }
}

template <class Out>
static void launch(GgmlType t, const void* src, int64_t n, Out* dst) {
  if (n == 0) return;
  const auto& tr = traits(t);
  const int threads = 256;
  const unsigned blocks = (unsigned)std::min<int64_t>(ceil_div(n, threads), 65535 * 8);
  dequant_kernel<Out><<<blocks, threads, 0, cur_stream()>>>((int)t, static_cast<const uint8_t*>(src), n, (int)tr.block_size,
                                           (int)tr.type_size, dst);
  MLACONF_CUDA_LAUNCH_CHECK("dequant_kernel");
}

void dequantize_f32(GgmlType t, const void* d_src, int64_t n, float* d_dst) {
  check_args(t, n, "cuda::dequantize_f32");
  launch<float>(t, d_src, n, d_dst);
}
void dequantize_f16(GgmlType t, const void* d_src, int64_t n, uint16_t* d_dst) {
  check_args(t, n, "cuda::dequantize_f16");
  launch<__half>(t, d_src, n, reinterpret_cast<__half*>(d_dst));
}

// Row t of dst = row ids[t] of the table: each value by the formula dequantize_f32 uses.
__global__ void embed_kernel(int type, const uint8_t* __restrict__ table, int64_t row_bytes, const int32_t* __restrict__ ids,
                             int64_t T, int64_t E, int bs, int ts, float* __restrict__ dst) {
  const IqGrids g = device_grids();
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < T * E; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = e / E, c = e - t * E, blk = c / bs;
    dst[e] = dq_elem(type, table + (int64_t)ids[t] * row_bytes + blk * ts, (int)(c - blk * bs), g);
  }
}

void embed_rows(GgmlType t, const void* d_table, int64_t row_bytes, const int32_t* d_ids, int64_t T, int64_t E, float* d_out) {
  check_args(t, E, "cuda::embed_rows");
  if (T * E == 0) return;
  const auto& tr = traits(t);
  const unsigned blocks = (unsigned)std::min<int64_t>(ceil_div(T * E, 256), 65535 * 8);
  embed_kernel<<<blocks, 256, 0, cur_stream()>>>((int)t, static_cast<const uint8_t*>(d_table), row_bytes, d_ids, T, E,
                                                 (int)tr.block_size, (int)tr.type_size, d_out);
  MLACONF_CUDA_LAUNCH_CHECK("embed_kernel");
}

void dequantize_host(GgmlType t, const uint8_t* src, int64_t n, float* dst) {
  check_args(t, n, "cuda::dequantize_host");
  const auto& tr = traits(t);
  const IqGrids g = host_grids();
  for (int64_t e = 0; e < n; ++e) {
    const int64_t blk = e / tr.block_size;
    dst[e] = dq_elem((int)t, src + blk * tr.type_size, (int)(e - blk * tr.block_size), g);
  }
}

}  // namespace mlaconf::cuda
