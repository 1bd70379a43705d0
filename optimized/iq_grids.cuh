// mlaconf optimized: the IQ lattice tables, as device and host copies local to each .cu that decodes
// blocks (no relocatable device code: each translation unit carries its own ~34 KB copy).
#pragma once
#include <cstdint>

#include "optimized/dequant_elem.cuh"

namespace mlaconf::cuda {
namespace {
#define MLACONF_GRID_QUAL __device__
#define MLACONF_GRID_NAME(x) d_##x
#include "optimized/iq_grids.inc"
#undef MLACONF_GRID_QUAL
#undef MLACONF_GRID_NAME
#define MLACONF_GRID_QUAL
#define MLACONF_GRID_NAME(x) h_##x
#include "optimized/iq_grids.inc"
#undef MLACONF_GRID_QUAL
#undef MLACONF_GRID_NAME

__device__ __forceinline__ IqGrids device_grids() {
  return IqGrids{d_kIq2xxsGrid, d_kIq2xsGrid, d_kIq2sGrid, d_kIq3xxsGrid, d_kIq3sGrid, d_kIq1sGrid};
}
[[maybe_unused]] IqGrids host_grids() {
  return IqGrids{h_kIq2xxsGrid, h_kIq2xsGrid, h_kIq2sGrid, h_kIq3xxsGrid, h_kIq3sGrid, h_kIq1sGrid};
}
}  // namespace
}  // namespace mlaconf::cuda
