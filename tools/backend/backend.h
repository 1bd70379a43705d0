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
#include "optimized/kernel_config.h"

namespace mlaconf::be {

// What this build or machine cannot do: core/error.h's (main() prints "not supported: ..." and exits 3).
using mlaconf::NotSupported;

struct BackendOptions {
  std::string precision = "f32";     // reference: f32 | f64 (the CUDA pipeline is always f16 storage)
  double expert_cache_gib = 4.0;     // reference: LRU budget for dequantized experts
  bool release_layer_weights = false;  // reference: drop each layer's weights after use (one-pass captures)
  int threads = 0;                   // reference: threads (reference/threads.h); 0 = every core
  int experts_in_flight = 1;         // reference: routed experts run side by side (ref::ModelOptions); 0 = by memory
  std::string fault;                 // negative control: "dense-attention" (both) or any optimized/faults.h name
  int64_t max_ctx = 4096;            // cuda: cache rows per layer
  std::vector<int> devices;          // cuda: the layer split's devices (empty: the current device alone; 0,0: virtual)
  cuda::KernelConfig kernels;        // cuda: kernel choices (--kernel-config over the MLACONF_* environment)
  // cuda, batched decode (Backend's sequence API): sequence slots (0: none) and the per-op overflow check (a
  // server does not scan every op: `bench --batch` turns it off). Graphs: kernels.decode_graph.
  int64_t max_seqs = 0;
  bool overflow_check = true;
};

// What a backend's batched decode runs with: the options in force.
struct DecodeSettings {
  bool decode_graph = false;
  bool batch_invariant = false;
  std::string split;  // the layer split, e.g. "devices 0,0: layers 0-1 | 2-3" ("" without one)
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

  // ---- Batched decode, as a server runs it (the CUDA pipeline, with BackendOptions::max_seqs > 0): B independent
  // sequences, each in a slot of one shared, paged cache, decoded one token each per step. The defaults throw
  // NotSupported ("<name> backend: batched decode is not supported"): the reference has none.
  virtual int open_sequence();
  virtual void close_sequence(int seq);
  // Appends n positions of pattern values (no model pass) to an open sequence: decode at a long context
  // without prefilling it.
  virtual void append_synthetic_context(int seq, int64_t n, uint64_t seed);
  // Appends the tokens to the sequence in one pass; returns the logits of its last position [vocab].
  virtual std::vector<double> prefill(int seq, std::span<const int32_t> ids);
  // One token of each of B distinct open sequences in one pass; each row's greedy pick (core/argmax.h's rule; -1
  // where the row's logits are all NaN), computed on the device.
  virtual std::vector<int32_t> decode_step_greedy(std::span<const int> seqs, std::span<const int32_t> ids);
  // n such steps, each step's picks the next one's tokens: picks [steps][B]; fewer steps when one picks -1.
  virtual std::vector<std::vector<int32_t>> decode_steps_greedy(std::span<const int> seqs, std::span<const int32_t> ids,
                                                                int64_t n);
  // Decode steps run so far as a replay of a captured CUDA graph (BackendOptions::kernels.decode_graph).
  virtual int64_t graph_replays() const;
  virtual DecodeSettings decode_settings() const;
};

// The copy bandwidth of CUDA device `device` (-1: the current one) in GB/s, read and write counted, measured now
// (the best of 5 device-to-device copies of 256 MiB; optimized/copy_bandwidth.h). NotSupported without CUDA.
double measure_copy_bandwidth_gbs(int device);

// "reference" or "cuda". Throws NotSupported (cuda without CUDA in the build or without a device),
// InputError for a bad name, model or option.
std::unique_ptr<Backend> make_backend(const std::string& name, const GgufFile& f, const ModelConfig& c,
                                      const BackendOptions& o);

}  // namespace mlaconf::be
