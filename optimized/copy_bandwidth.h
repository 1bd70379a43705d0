// mlaconf optimized: the copy bandwidth of a CUDA device, measured (what `mlaconf bench` computes its
// read floor from). Usable without nvcc.
#pragma once
#include <cstddef>

namespace mlaconf::cuda {

// GB/s (1e9 bytes per second) of a device-to-device cudaMemcpy of `bytes` on CUDA device `device` (-1: the current one), read and write
// counted (2 x bytes per copy, as CUDA's bandwidthTest and bench/kernel_bench.cu count it): one untimed copy, then
// the best of `repeats` copies, each timed with events. Its two buffers are freed before it returns, and the
// current device is left as it was.
double measure_copy_bandwidth_gbs(int device, size_t bytes, int repeats);

}  // namespace mlaconf::cuda
