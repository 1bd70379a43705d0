// mlaconf CLI: the two backends behind `generate` and `bench`, as one interface.
//
// A Backend turns token ids into next-token logits and keeps its own caches (the reference's Model<S>,
// or the CUDA Pipeline). Only tools/ sees both halves: reference and optimized never meet elsewhere.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/model_config.h"

namespace mlaconf::cli {

// What a backend reports when it cannot run here (the CLI maps it to exit 3, "not supported: ...").
struct NotSupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Appends `ids` at the next positions; returns the logits of the last one (double, [vocab]).
  virtual std::vector<double> next_logits(const std::vector<int32_t>& ids) = 0;
  // Forgets every position (empties the caches); loaded weights stay.
  virtual void reset() = 0;
  virtual std::string describe() const = 0;
};

// The Eigen reference in "f32" or "f64"; `dense` ignores the indexer (the negative-control fault).
std::unique_ptr<Backend> make_reference_backend(const std::string& precision, double expert_cache_gib,
                                                const GgufFile& f, const ModelConfig& c, bool dense);
// The CUDA pipeline with room for `ctx` tokens; `fault` names an optimized/faults.h fault ("" = none);
// `devices`: the layer split's devices (PipelineOptions::devices; empty = the current device alone).
// Throws NotSupported (prefixed by `who`) in a build without CUDA or on a machine without a device.
std::unique_ptr<Backend> make_cuda_backend(const std::string& who, const std::string& fault, const GgufFile& f,
                                           const ModelConfig& c, int64_t ctx, const std::vector<int>& devices = {});

}  // namespace mlaconf::cli
