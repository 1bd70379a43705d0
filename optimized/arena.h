// mlaconf optimized: the temporaries of one pass (a forward pass, a decode step) bump-allocated from one
// device buffer per device, instead of a stream-ordered malloc + poison memset + free per buffer.
//
// Why: a decode step makes ~90 short-lived buffers; each cost three API calls (cudaMallocAsync,
// cudaMemsetAsync 0xFF, cudaFreeAsync: ~9 us of host time together, measured with CUPTI on the H200)
// and a memset on the device, so the step was bound by the host and a graph of it held ~80 memset and
// as many alloc/free nodes. Here a buffer of a pass is a pointer bump (256-byte aligned, as cudaMalloc
// aligns) and the pass ends with ONE memset 0xFF of the range it used.
//
// Poisoning is kept (a conformance feature): outside a pass every byte of an arena is 0xFF (fresh
// arenas are poisoned by DeviceBuffer; each pass poisons what it used when it ends), and no byte is
// handed out twice in a pass, so every temporary still starts as NaN and a kernel that forgets to
// write its output is caught. Poisoning at the end (not the start) of a pass keeps this true for a
// replayed CUDA graph too: the memset is captured with the pass and re-poisons after each replay,
// whatever ran before, with no host bookkeeping.
//
//   PassArenas arenas;                              // owned by the pipeline; empty until a pass needs memory
//   { PassArenas::Scope pass(arenas, {dev0, dev1});  // this thread's pass, over these devices
//     DeviceBuffer x = temp_buffer(bytes);          // from the current device's arena (a borrowed view)
//     ...                                           // launches that use x, on cur_stream()
//   }                                               // poisons what the pass used (x must be gone by now)
//
// Sizing: the first pass of a shape takes what does not fit from the stream-ordered pool (the old
// path, poisoned as before) and records its demand; when a pass ends outside a graph capture, an arena
// whose pass wanted more grows to 1.5x that demand (capped at max_bytes per device; beyond the cap a
// pass keeps using the old path), which moves its memory: bump_workspace_generation(), so a captured
// graph that holds the old addresses is captured again (as for the kernels' scratch). A pass under
// capture never moves an arena (the capture would hold the move): it records the demand for later.
#pragma once
#include <cstddef>
#include <vector>

#include "optimized/api.h"

namespace mlaconf::cuda {

class PassArenas {
 public:
  static constexpr size_t kAlign = 256;
  // max_bytes: the cap per device (the pipeline's PipelineOptions::pass_arena_bytes; 0: never an arena).
  explicit PassArenas(size_t max_bytes) : max_bytes_(max_bytes) {}
  PassArenas(const PassArenas&) = delete;
  PassArenas& operator=(const PassArenas&) = delete;

  // The pass of this thread over `devices` (ordinals; repeats allowed: one arena per device). While it
  // lives, temp_buffer() on one of them takes from its arena. Not nested (CudaError).
  class Scope {
   public:
    Scope(PassArenas& a, const std::vector<int>& devices);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    PassArenas& a_;
    int uncaught_;  // std::uncaught_exceptions() at the start: the end knows whether it unwinds
  };

  // For tests and reports: the arena of device `dev` (0 when it has none).
  size_t capacity(int dev) const;
  size_t used(int dev) const;    // in the pass now, or by the last pass
  size_t demand(int dev) const;  // what the pass now (or the last) asked for, fitting or not

 private:
  friend DeviceBuffer temp_buffer(size_t bytes);
  struct Arena {
    int dev = 0;
    DeviceBuffer buf;
    size_t used = 0, demand = 0, want = 0;
    bool active = false;
  };
  Arena* find(int dev);
  const Arena* find(int dev) const;
  void grow(Arena& a);  // to a.want, outside a capture
  size_t max_bytes_;
  std::vector<Arena> arenas_;
};

// A temporary of this thread's pass: `bytes` from the active scope's arena of the current device, or,
// outside a pass (or where the arena is full), a DeviceBuffer(bytes) of its own. Poisoned either way.
DeviceBuffer temp_buffer(size_t bytes);

}  // namespace mlaconf::cuda
