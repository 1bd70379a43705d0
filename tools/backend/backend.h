// mlaconf tools/backend: the one interface behind which every backend runs (the Eigen reference, the
// CUDA pipeline, any later one). Only tools/ and suites/ see it: this is where reference and optimized
// meet, and nowhere else (fixtures/ holds the schema, the I/O and the judge, and runs no model).
//
// Three ways to run a backend:
//   forward   tokens at positions n_past().., every op's output to a Trace (core/trace.h names);
//   forward with forced decisions: the indexer selections and expert ids of another run
//             (core/decisions.h) are USED; the backend's own are still computed and recorded;
//   replay    one op of one layer on exact inputs taken from a fixture (op_replay.h), so that
//             nothing compounds: `mlaconf answer`.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/decisions.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/trace.h"

namespace mlaconf::be {

// What this build or machine cannot do: core/error.h's (main() prints "not supported: ..." and exits 3).
using mlaconf::NotSupported;

struct BackendOptions {
  std::string precision = "f32";     // reference: f32 | f64 (the CUDA pipeline is always f16 storage)
  double expert_cache_gib = 4.0;     // reference: LRU budget for dequantized experts
  bool release_layer_weights = false;  // reference: drop each layer's weights after use (one-pass captures)
  int threads = 0;                   // reference: threads (reference/threads.h); 0 = every core
  std::string fault;                 // negative control: "dense-attention" (both) or any optimized/faults.h name
  int64_t max_ctx = 4096;            // cuda: cache rows per layer
  std::vector<int> devices;          // cuda: the layer split's devices (empty: the current device alone; 0,0: virtual)
};

// A pass over part of the model (the reference only): layers [l_begin, l_end), fed the token
// embeddings directly when l_begin > 0 ("synthetic" hidden source); the head runs when `head`.
struct LayerRange {
  int64_t l_begin = 0, l_end = -1;  // -1: every layer
  bool head = true;
  bool head_all_rows = false;       // the head over every row (a fixture's logits [T, vocab]), not the last only
};

// A host tensor: row-major values as double, with its shape (op replay's inputs and outputs).
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<double> v;
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
};
using Tensors = std::map<std::string, HostTensor>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;       // "reference" | "cuda"
  virtual std::string precision() const = 0;  // what a fixture records: f64 | f32 | f16
  virtual std::string describe() const = 0;   // "reference f32 (fault: dense-attention)"
  virtual int64_t n_past() const = 0;

  // Runs ids at positions n_past()..n_past()+T-1 and returns the logits of the LAST position [vocab]
  // (empty when the range has no head). Each op's output goes to `trace` (may be null); `forced` (may be
  // null) replaces the backend's own decisions for the layers it lists.
  virtual std::vector<double> forward(std::span<const int32_t> ids, Trace* trace = nullptr,
                                      const ForcedDecisions* forced = nullptr) = 0;
  // Forgets every position (empties the caches); loaded weights stay.
  virtual void reset() = 0;
  // Restricts later forward() calls to a layer range (reference only; others throw NotSupported unless
  // the range is the whole model).
  virtual void set_range(const LayerRange& r);

  // Op replay: runs operation `op` (an output dataset name of op_replay.h's table) of `layer` on
  // `in` (the table's inputs, exact, from a fixture; `pos0` = position of the first row) and returns
  // its outputs by dataset name. Decisions are never recomputed downstream: attention uses the
  // `indexer_topk` it is given, experts the given `router_ids`.
  virtual Tensors replay(int layer, const std::string& op, const Tensors& in, int64_t pos0) = 0;
};

// "reference" or "cuda". Throws NotSupported (cuda without CUDA in the build or without a device),
// InputError for a bad name, model or option.
std::unique_ptr<Backend> make_backend(const std::string& name, const GgufFile& f, const ModelConfig& c,
                                      const BackendOptions& o);

}  // namespace mlaconf::be
