// mlaconf optimized: helpers shared by the .cu files (CUDA error checks, exact float ops, raw loads).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "optimized/api.h"

namespace mlaconf::cuda {

// Every CUDA runtime call goes through this: a failure becomes CudaError naming the call and the place.
[[noreturn]] void throw_cuda(cudaError_t e, const char* what, const char* file, int line);
#define MLACONF_CUDA_CHECK(call)                                                   \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) ::mlaconf::cuda::throw_cuda(e_, #call, __FILE__, __LINE__); \
  } while (0)
// After a launch: launch-configuration errors now, execution errors at the next sync.
#define MLACONF_CUDA_LAUNCH_CHECK(name) MLACONF_CUDA_CHECK(cudaPeekAtLastError())

// Exact (never contracted into FMA) arithmetic, identical on the host and the device, so the dequant
// formulas give the same bits as the scalar CPU reference (which gcc does not contract on x86-64).
#if defined(__CUDA_ARCH__)
#define MUL_RN(a, b) __fmul_rn((a), (b))
#define ADD_RN(a, b) __fadd_rn((a), (b))
#define SUB_RN(a, b) __fsub_rn((a), (b))
#else
#define MUL_RN(a, b) ((float)(a) * (float)(b))
#define ADD_RN(a, b) ((float)(a) + (float)(b))
#define SUB_RN(a, b) ((float)(a) - (float)(b))
#endif

__host__ __device__ __forceinline__ uint16_t ld_u16(const uint8_t* p) { return (uint16_t)(p[0] | (p[1] << 8)); }
__host__ __device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
__host__ __device__ __forceinline__ float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}
// IEEE half -> float, exactly (subnormals, inf, NaN), by bit manipulation so host and device agree.
__host__ __device__ __forceinline__ float half_bits_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  // inf; NaN keeps sign and payload and comes out quiet (bit 22), as ggml's F16C / CUDA conversions do
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u));
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    // subnormal: normalise
    int e = -1;
    do { man <<= 1; ++e; } while ((man & 0x400u) == 0);
    man &= 0x3ffu;
    return bits_to_float(sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13));
  }
  return bits_to_float(sign | ((exp + 127 - 15) << 23) | (man << 13));
}
__host__ __device__ __forceinline__ float ld_f16(const uint8_t* p) { return half_bits_to_float(ld_u16(p)); }

#if defined(__CUDACC__)
// Little-endian u32 at any byte address p of shared memory (reads up to 7 bytes past p + 3, inside the
// caller's staging headroom): two aligned loads and a funnel shift. The aligned address is formed by
// pointer arithmetic on p, not through an integer, so the compiler keeps it in the shared window (LDS with a
// 32-bit address); a round trip through uintptr_t made these generic 64-bit loads (LD.E in the SASS).
__device__ __forceinline__ uint32_t lds_u32(const uint8_t* p) {
  const unsigned mis = (unsigned)reinterpret_cast<uintptr_t>(p) & 3u;
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p - mis);
  return __funnelshift_r(w[0], w[1], mis * 8);
}
// Byte k of a word holding small unsigned integers, as an exact float minus `off`: the byte goes into the
// mantissa of 2^23 (0x4B0000qq) and 2^23 + off is subtracted (exact for q, off < 2^23). exp_bytes is
// 2^23's exponent bytes (0x4B000000); a caller may pass them from __constant__ memory so that PRMT takes
// them from the constant bank and its selector as the immediate (gemv_mma.cu: with both literal the
// compiler re-materialised the selector before every PRMT).
__device__ __forceinline__ float byte_as_float(uint32_t word, int k, float off, uint32_t exp_bytes = 0x4B000000u) {
  return __fsub_rn(__uint_as_float(__byte_perm(word, exp_bytes, 0x7540u | (unsigned)k)), 8388608.f + off);
}
// An f16 at an even address, by the hardware conversion: the same bits as half_bits_to_float for every
// input (the conversion is exact; NaN stays NaN with its payload, quieted), in one instruction.
__device__ __forceinline__ float ld_f16_hw(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}
#endif

// The stream of every launch, stream-ordered allocation and async copy on this thread: the legacy
// default stream (0), or, while a CudaGraph captures, its capture stream.
cudaStream_t cur_stream();
// 1 inside SideStream::run (its launches on the side stream), else 0: scratch() keeps a set of slots per lane.
int stream_lane();
// True while a CudaGraph captures this thread's work (cur_stream() alone also differs from 0 inside SideStream::run).
bool capturing();
// Called where a kernel's scratch, ticket or work memory is reallocated (api.h: workspace_generation).
void bump_workspace_generation();

// Per-slot scratch device memory, grown on demand and reused (kernels run in order on one stream).
// Slots: 0-2 sparse MLA's split partials, 3 the indexer selection's hi, 4 argmax_rows' chunk candidates,
// 5-6 the tensor-core GEMV's x terms, 7 count_nonfinite's counter.
void* scratch(int slot, size_t bytes);
// Multiprocessors of the current device (read once: every device of a split is the same model).
int device_sm_count();

// A programmatic dependent launch on cur_stream() (sm_90 and later): the kernel's CTAs may start while the
// stream's previous kernel still runs (once each of its CTAs has executed griddepcontrol.launch_dependents or
// exited); the kernel must execute griddepcontrol.wait before it reads what that kernel writes. The kernels
// before that one have finished, as in any launch.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = cur_stream();
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &pdl;
  cfg.numAttrs = 1;
  MLACONF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// The device side of a programmatic dependent launch (sm_90 and later). pdl_trigger: the stream's next kernel,
// if launch_dependent queued it, may start now (every CTA of this one has triggered or exited); a kernel
// whose successor only waits for it (sparse MLA's merge, split_x, the tensor-core GEMV) triggers at its start,
// so that the successor's CTAs launch and do what needs no input (the GEMV stages its first weight blocks)
// while this one runs. pdl_wait: this kernel's predecessor has finished and its writes are visible (a no-op
// where the launch had no programmatic dependency). A kernel launched by launch_dependent must pdl_wait
// before it reads anything its predecessor writes, and before it writes anything that one reads.
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;\n"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

inline unsigned ceil_div(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }
// n rounded up to a multiple of a (the arenas' and packed uploads' alignment).
constexpr size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace mlaconf::cuda
