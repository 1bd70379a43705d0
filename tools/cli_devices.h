// mlaconf CLI: `--devices 0,1,...` (generate, capture --backend cuda, bench): the CUDA devices of a layer
// split, in stage order (optimized/pipeline.h PipelineOptions::devices). An ordinal may repeat: virtual
// devices of one GPU run the split's code path on one GPU.
#pragma once
#include <string>
#include <vector>

namespace mlaconf::cli {

// "0,1,1" -> {0, 1, 1}; "" -> {} (no split). InputError for anything else (names the option).
std::vector<int> parse_devices(const std::string& s);

}  // namespace mlaconf::cli
