// mlaconf optimized: device discovery, checked errors, owned device buffers, half conversions.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>
#include <utility>

#include "optimized/api.h"
#include "optimized/common.cuh"

namespace mlaconf::cuda {

void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw CudaError(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + what +
                  " at " + file + ":" + std::to_string(line));
}

bool cuda_available(std::string* why_not) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why_not) *why_not = std::string("no CUDA device (") + cudaGetErrorString(e) + ")";
    cudaGetLastError();
    return false;
  }
  if (n == 0) {
    if (why_not) *why_not = "no CUDA device";
    return false;
  }
  return true;
}

void synchronize() { MLACONF_CUDA_CHECK(cudaDeviceSynchronize()); }

DeviceBuffer::DeviceBuffer(size_t bytes) : n_(bytes) {
  if (bytes) {
    MLACONF_CUDA_CHECK(cudaMalloc(&p_, bytes));
    MLACONF_CUDA_CHECK(cudaMemset(p_, 0xFF, bytes));  // poison
  }
}
DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}
void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  if (offset + bytes > n_) throw CudaError("DeviceBuffer::upload past the end");
  MLACONF_CUDA_CHECK(cudaMemcpy(static_cast<char*>(p_) + offset, host, bytes, cudaMemcpyHostToDevice));
}
void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  if (offset + bytes > n_) throw CudaError("DeviceBuffer::download past the end");
  MLACONF_CUDA_CHECK(cudaMemcpy(host, static_cast<const char*>(p_) + offset, bytes, cudaMemcpyDeviceToHost));
}
void DeviceBuffer::fill(uint8_t byte) {
  if (n_) MLACONF_CUDA_CHECK(cudaMemset(p_, byte, n_));
}

void* scratch(int slot, size_t bytes) {
  static DeviceBuffer bufs[8];
  if (slot < 0 || slot >= 8) throw CudaError("scratch: bad slot");
  if (bufs[slot].bytes() < bytes) {
    bufs[slot] = DeviceBuffer();  // free first
    bufs[slot] = DeviceBuffer(bytes + bytes / 4);
  }
  return bufs[slot].get();
}

void copy_to_host(void* host, const void* d_src, size_t bytes) {
  if (bytes) MLACONF_CUDA_CHECK(cudaMemcpy(host, d_src, bytes, cudaMemcpyDeviceToHost));
}

uint16_t float_to_half_bits(float f) {
  __half h = __float2half_rn(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
float half_bits_to_float_host(uint16_t h) { return half_bits_to_float(h); }

}  // namespace mlaconf::cuda
