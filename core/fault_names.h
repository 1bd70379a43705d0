// mlaconf: the names of the CUDA pipeline's negative-control faults (optimized/faults.h), in one list.
// A CPU-only build has no pipeline to ask, yet must tell a typo (exit 2) from a real fault name that
// cannot run here (exit 3): both read this list. Names only, no behaviour.
#pragma once
#include <array>
#include <string_view>

namespace mlaconf {

// In the order of optimized/faults.h's Fault enum (after None).
inline constexpr std::array<std::string_view, 8> kFaultNames = {"dense-attention", "topk-upper-tie", "no-lse-merge",
                                                                "inject-overflow", "split-no-handoff", "gemv-drop-tail",
                                                                "gemv-x-bf16",     "indexer-no-bound"};

}  // namespace mlaconf
