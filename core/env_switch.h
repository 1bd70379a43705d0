// mlaconf core: the one reader of the project's 0|1 environment switches (MLACONF_CUDA_* in the CUDA pipeline,
// MLACONF_MMA_* in the tensor-core GEMV, MLACONF_GROUP_EXPERTS). Measuring knobs, but a typo must not pass for
// a setting: unset or empty is the caller's default (std::nullopt), "0" and "1" are off and on, anything else
// is an InputError naming the variable (the CLI prints one line and exits 2). Header-only, so that the
// kernel benchmark's nvcc-only build (bench/gpu_kernel_bench.sh) needs no more sources.
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

#include "core/error.h"

namespace mlaconf {

inline std::optional<bool> env_switch(const char* name) {
  const char* e = std::getenv(name);
  if (!e || !*e) return std::nullopt;
  const std::string v = e;
  if (v == "0") return false;
  if (v == "1") return true;
  throw InputError(std::string(name) + " must be 0 or 1, not '" + v + "'");
}

}  // namespace mlaconf
