// mlaconf tools: the read floor of `mlaconf bench --batch`: the bytes one batched decode step must read, and the
// time and tokens/s they take at a bandwidth (the device's copy bandwidth, measured at the start of the run).
#pragma once
#include <cstdint>
#include <span>

#include "core/gguf.h"
#include "core/model_config.h"

namespace mlaconf::cli {

// Bytes one decode step of B sequences at context L must read: the weights once (token_embd: the B rows it
// looks up; the experts: the expected number of distinct ones B tokens pick under uniform routing; the nextn
// layers, which do not run, not at all), plus per sequence and layer its top-k latent rows (fp16) and, on full
// indexer layers, all L indexer keys (fp32).
struct StepBytes {
  double weights = 0, cache = 0;
  double total() const { return weights + cache; }
};
StepBytes step_bytes(std::span<const TensorInfo> tensors, const ModelConfig& c, int64_t B, int64_t L);

// A step's floor: its bytes at `gbs` GB/s (1e9 bytes per second), per step and as tokens/s of B sequences.
struct ReadFloor {
  double ms_per_step = 0;
  double tokens_per_s = 0;
};
ReadFloor read_floor(const StepBytes& s, int64_t B, double gbs);

// The share of the floor a step reached, in percent (100: at the floor); 0 when no step was timed.
double percent_of_floor(const ReadFloor& f, double step_ms);

}  // namespace mlaconf::cli
