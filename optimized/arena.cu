// mlaconf optimized: the per-pass arenas of temporaries (optimized/arena.h says why and how).
#include <algorithm>
#include <exception>

#include "optimized/arena.h"
#include "optimized/common.cuh"

namespace mlaconf::cuda {
namespace {
thread_local PassArenas* g_active = nullptr;  // the arenas of this thread's pass, if one is running
}  // namespace

PassArenas::Arena* PassArenas::find(int dev) {
  for (Arena& a : arenas_)
    if (a.dev == dev) return &a;
  return nullptr;
}
const PassArenas::Arena* PassArenas::find(int dev) const { return const_cast<PassArenas*>(this)->find(dev); }
size_t PassArenas::capacity(int dev) const {
  const Arena* a = find(dev);
  return a ? a->buf.bytes() : 0;
}
size_t PassArenas::used(int dev) const {
  const Arena* a = find(dev);
  return a ? a->used : 0;
}
size_t PassArenas::demand(int dev) const {
  const Arena* a = find(dev);
  return a ? a->demand : 0;
}

// The old buffer is freed stream-ordered (after the work queued on its device so far); the new one is
// poisoned whole by DeviceBuffer. Its addresses are new: captured graphs must be captured again.
void PassArenas::grow(Arena& a) {
  DeviceScope on(a.dev);
  a.buf = DeviceBuffer();
  a.buf = DeviceBuffer(a.want);
  bump_workspace_generation();
}

PassArenas::Scope::Scope(PassArenas& a, const std::vector<int>& devices) : a_(a), uncaught_(std::uncaught_exceptions()) {
  if (g_active) throw CudaError("PassArenas::Scope: a pass is already running on this thread");
  for (int dev : devices) {  // first every arena in place (growth may throw), then the pass starts
    Arena* ar = a.find(dev);
    if (!ar) {
      a.arenas_.emplace_back();
      a.arenas_.back().dev = dev;
      ar = &a.arenas_.back();
    }
    if (!capturing() && ar->want > ar->buf.bytes()) a.grow(*ar);  // a demand recorded under a capture
  }
  for (int dev : devices) {
    Arena* ar = a.find(dev);
    ar->active = true;
    ar->used = ar->demand = 0;
  }
  g_active = &a;
}

// Never throws: it also ends a pass that is unwinding. A failed memset (a capture that broke, a
// device error that every later call reports anyway) is cleared; a captured pass ran nothing, so its
// arena is still poisoned. The memset and a growth's free are queued on the arena's device after the
// pass's work there; the work of a pass over several devices is ordered before its end by its logits
// download (a peer copy reading this arena from another device's stream is done by then); a pass that
// throws may leave such a copy queued: the devices are synchronized first.
PassArenas::Scope::~Scope() {
  g_active = nullptr;
  const bool unwinding = std::uncaught_exceptions() > uncaught_;
  for (Arena& ar : a_.arenas_) {
    if (!ar.active) continue;
    ar.active = false;
    if (ar.demand > ar.buf.bytes()) {  // wanted more: 1.5x the demand (headroom for a growing context), capped
      const size_t want = std::min(round_up(ar.demand + ar.demand / 2, kAlign), a_.max_bytes_);
      ar.want = std::max(ar.want, want);
    }
    try {
      DeviceScope on(ar.dev);
      if (unwinding && !capturing() && cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
      if (!capturing() && ar.want > ar.buf.bytes()) {
        a_.grow(ar);  // fresh and poisoned: the memset is not needed
      } else if (ar.used) {
        if (cudaMemsetAsync(ar.buf.get(), 0xFF, ar.used, cur_stream()) != cudaSuccess) cudaGetLastError();
      }
    } catch (...) {  // DeviceScope or the growth failed: the next pass reports the device's state
      cudaGetLastError();
    }
  }
}

DeviceBuffer temp_buffer(size_t bytes) {
  PassArenas* pa = g_active;
  if (!pa || bytes == 0) return DeviceBuffer(bytes);
  PassArenas::Arena* ar = pa->find(current_device());
  if (!ar || !ar->active) return DeviceBuffer(bytes);
  const size_t n = round_up(bytes, PassArenas::kAlign);
  ar->demand += n;
  if (ar->used + n > ar->buf.bytes()) return DeviceBuffer(bytes);  // full: a buffer of its own, as before
  void* p = static_cast<char*>(ar->buf.get()) + ar->used;
  ar->used += n;
  return DeviceBuffer::borrowed(p, bytes);
}

}  // namespace mlaconf::cuda
