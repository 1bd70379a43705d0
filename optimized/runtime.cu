// mlaconf optimized: device discovery, checked errors, owned device buffers, half conversions.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>
#include <utility>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"
#include "optimized/copy_bandwidth.h"

namespace mlaconf::cuda {

void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw CudaError(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + what +
                  " at " + file + ":" + std::to_string(line));
}

bool cuda_available(std::string* why_not) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why_not) *why_not = std::string("no CUDA device (") + cudaGetErrorString(e) + ")";
    cudaGetLastError();
    return false;
  }
  if (n == 0) {
    if (why_not) *why_not = "no CUDA device";
    return false;
  }
  return true;
}

void synchronize() { MLACONF_CUDA_CHECK(cudaDeviceSynchronize()); }

double measure_copy_bandwidth_gbs(int device, size_t bytes, int repeats) {
  if (bytes == 0 || repeats < 1) throw std::logic_error("measure_copy_bandwidth_gbs: bytes and repeats must be positive");
  DeviceScope on(device < 0 ? current_device() : device);
  DeviceBuffer a(bytes), b(bytes);
  cudaEvent_t start, stop;
  MLACONF_CUDA_CHECK(cudaEventCreate(&start));
  MLACONF_CUDA_CHECK(cudaEventCreate(&stop));
  float best_ms = 0;
  try {
    const cudaStream_t s = cur_stream();
    MLACONF_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));  // untimed: first touch
    for (int r = 0; r < repeats; ++r) {
      MLACONF_CUDA_CHECK(cudaEventRecord(start, s));
      MLACONF_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));
      MLACONF_CUDA_CHECK(cudaEventRecord(stop, s));
      MLACONF_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      MLACONF_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (r == 0 || ms < best_ms) best_ms = ms;
    }
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  MLACONF_CUDA_CHECK(cudaEventDestroy(start));
  MLACONF_CUDA_CHECK(cudaEventDestroy(stop));
  return best_ms > 0 ? 2.0 * (double)bytes / ((double)best_ms * 1e-3) / 1e9 : 0.0;
}

int device_count() {
  int n = 0;
  MLACONF_CUDA_CHECK(cudaGetDeviceCount(&n));
  return n;
}
int current_device() {
  int d = 0;
  MLACONF_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}
void set_device(int ordinal) {
  const int n = device_count();
  if (ordinal < 0 || ordinal >= n)
    throw InputError("CUDA device " + std::to_string(ordinal) + " does not exist (" + std::to_string(n) + " device" +
                     (n == 1 ? "" : "s") + " here)");
  MLACONF_CUDA_CHECK(cudaSetDevice(ordinal));
}
DeviceScope::DeviceScope(int ordinal) : prev_(current_device()) { set_device(ordinal); }
DeviceScope::~DeviceScope() { cudaSetDevice(prev_); }

namespace {
// Whether `dev` has stream-ordered memory pools; on first use its default pool is told to keep up to
// 4 GiB of freed memory (returned to the driver above that at a synchronization), so that freed blocks
// serve the next allocations without giving memory that other allocators need to the pool for good.
bool device_pools(int dev) {
  constexpr int kMaxDevices = 64;
  static int state[kMaxDevices] = {};  // 0 unknown, 1 pools, 2 none
  if (dev < 0 || dev >= kMaxDevices) return false;
  if (state[dev] == 0) {
    int v = 0;
    MLACONF_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, dev));
    if (v) {
      cudaMemPool_t pool;
      MLACONF_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
      uint64_t keep = uint64_t{4} << 30;
      MLACONF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    }
    state[dev] = v ? 1 : 2;
  }
  return state[dev] == 1;
}
}  // namespace

void enable_peer_access(const std::vector<int>& ordinals) {
  DeviceScope keep(current_device());
  for (int a : ordinals)
    for (int b : ordinals) {
      if (a == b) continue;
      int can = 0;
      MLACONF_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) continue;
      set_device(a);
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();  // not an error here: clear it
      else MLACONF_CUDA_CHECK(e);
      if (device_pools(b)) {  // DeviceBuffers from b's pool: peer access is granted per pool
        cudaMemPool_t pool;
        MLACONF_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, b));
        cudaMemAccessDesc d{};
        d.location.type = cudaMemLocationTypeDevice;
        d.location.id = a;
        d.flags = cudaMemAccessFlagsProtReadWrite;
        MLACONF_CUDA_CHECK(cudaMemPoolSetAccess(pool, &d, 1));
      }
    }
}

void copy_peer(void* d_dst, int dst, const void* d_src, int src, size_t bytes) {
  // The legacy default streams of two devices are not ordered with each other: an event recorded on
  // src's stream, waited for on dst's, orders the copy after src's producers and before dst's consumers.
  cudaEvent_t ev;
  set_device(src);
  MLACONF_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  MLACONF_CUDA_CHECK(cudaEventRecord(ev, 0));
  set_device(dst);
  MLACONF_CUDA_CHECK(cudaStreamWaitEvent(0, ev, 0));
  MLACONF_CUDA_CHECK(cudaEventDestroy(ev));  // released once the wait has completed
  if (bytes) MLACONF_CUDA_CHECK(cudaMemcpyPeerAsync(d_dst, dst, d_src, src, bytes, 0));
}


DeviceBuffer::DeviceBuffer(size_t bytes) : n_(bytes) {
  if (bytes) {
    dev_ = current_device();
    pooled_ = device_pools(dev_);
    if (pooled_) {
      MLACONF_CUDA_CHECK(cudaMallocAsync(&p_, bytes, cur_stream()));
      MLACONF_CUDA_CHECK(cudaMemsetAsync(p_, 0xFF, bytes, cur_stream()));  // poison
    } else {
      MLACONF_CUDA_CHECK(cudaMalloc(&p_, bytes));
      MLACONF_CUDA_CHECK(cudaMemsetAsync(p_, 0xFF, bytes, cur_stream()));  // poison, before the stream's next use
    }
  }
}
DeviceBuffer DeviceBuffer::borrowed(void* p, size_t bytes) {
  DeviceBuffer b;
  b.p_ = p, b.n_ = bytes, b.borrowed_ = true;
  return b;
}
// Pooled memory is freed on its own device's stream, after the work queued there so far.
void DeviceBuffer::release() {
  if (!p_) return;
  if (borrowed_) {
    borrowed_ = false;
  } else if (pooled_) {
    int cur = dev_;
    cudaGetDevice(&cur);
    if (cur != dev_) cudaSetDevice(dev_);
    cudaFreeAsync(p_, cur_stream());
    if (cur != dev_) cudaSetDevice(cur);
  } else {
    cudaFree(p_);
  }
  p_ = nullptr;
  n_ = 0;
}
DeviceBuffer::~DeviceBuffer() { release(); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)),
      n_(std::exchange(o.n_, 0)),
      dev_(o.dev_),
      pooled_(o.pooled_),
      borrowed_(std::exchange(o.borrowed_, false)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
    dev_ = o.dev_;
    pooled_ = o.pooled_;
    borrowed_ = std::exchange(o.borrowed_, false);
  }
  return *this;
}
void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  if (offset + bytes > n_) throw CudaError("DeviceBuffer::upload past the end");
  MLACONF_CUDA_CHECK(cudaMemcpy(static_cast<char*>(p_) + offset, host, bytes, cudaMemcpyHostToDevice));
}
void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  if (offset + bytes > n_) throw CudaError("DeviceBuffer::download past the end");
  MLACONF_CUDA_CHECK(cudaMemcpy(host, static_cast<const char*>(p_) + offset, bytes, cudaMemcpyDeviceToHost));
}
// Stream-ordered on cur_stream() (the side stream's work memory is set before its kernels read it).
void DeviceBuffer::fill(uint8_t byte) {
  if (n_) MLACONF_CUDA_CHECK(cudaMemsetAsync(p_, byte, n_, cur_stream()));
}

void* scratch(int slot, size_t bytes) {
  // One set per device: a kernel may only touch its own device's memory (no peer access assumed).
  constexpr int kMaxDevices = 64;
  // And one set per stream lane (SideStream::run's kernels may run beside the main stream's).
  static DeviceBuffer bufs[kMaxDevices][2][8];
  if (slot < 0 || slot >= 8) throw CudaError("scratch: bad slot");
  const int d = current_device();
  if (d >= kMaxDevices) throw CudaError("scratch: device ordinal " + std::to_string(d) + " beyond 63");
  DeviceBuffer& b = bufs[d][stream_lane()][slot];
  if (b.bytes() < bytes) {
    b = DeviceBuffer();  // free first
    b = DeviceBuffer(bytes + bytes / 4);
    bump_workspace_generation();
  }
  return b.get();
}

namespace {
uint64_t g_workspace_generation = 0;
}  // namespace
uint64_t workspace_generation() { return g_workspace_generation; }
void bump_workspace_generation() { ++g_workspace_generation; }

namespace {
thread_local cudaStream_t g_stream = 0;  // cur_stream(): 0 (legacy) unless a CudaGraph captures
thread_local cudaStream_t g_side = nullptr;  // inside SideStream::run: the side stream, which cur_stream() returns

// Per host thread and device: the side stream and the fork and join events (reused: a wait takes the event's
// state at the call, so another thread's record between a fork's record and its wait must not reach them).
struct SideResources {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};
SideResources& side_resources(int dev) {
  constexpr int kMaxDevices = 64;
  thread_local SideResources r[kMaxDevices];
  if (dev < 0 || dev >= kMaxDevices) throw CudaError("SideStream: device ordinal " + std::to_string(dev) + " beyond 63");
  SideResources& s = r[dev];
  if (!s.stream) {  // all three or none
    SideResources n;
    cudaError_t e = cudaStreamCreateWithFlags(&n.stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&n.fork, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&n.join, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      if (n.join) cudaEventDestroy(n.join);
      if (n.fork) cudaEventDestroy(n.fork);
      if (n.stream) cudaStreamDestroy(n.stream);
      MLACONF_CUDA_CHECK(e);
    }
    s = n;
  }
  return s;
}
}  // namespace
cudaStream_t cur_stream() { return g_side ? g_side : g_stream; }
int stream_lane() { return g_side ? 1 : 0; }
bool capturing() { return g_stream != 0; }

SideStream::SideStream() {
  if (g_side) throw CudaError("SideStream: a fork inside SideStream::run");
  dev_ = current_device();
  main_ = g_stream;
  fork();
}
void SideStream::fork() {
  DeviceScope on(dev_);
  SideResources& r = side_resources(dev_);
  MLACONF_CUDA_CHECK(cudaEventRecord(r.fork, static_cast<cudaStream_t>(main_)));
  MLACONF_CUDA_CHECK(cudaStreamWaitEvent(r.stream, r.fork, 0));
}
void SideStream::enter() {
  if (g_side) throw CudaError("SideStream::run does not nest");
  if (current_device() != dev_) throw CudaError("SideStream::run on another device than its fork's");
  g_side = side_resources(dev_).stream;
}
void SideStream::leave() { g_side = nullptr; }
void SideStream::refork() {
  if (g_side) throw CudaError("SideStream::refork inside run()");
  if (joined_) throw CudaError("SideStream::refork after join()");
  fork();
}
void SideStream::join() {
  if (joined_) return;
  DeviceScope on(dev_);
  SideResources& r = side_resources(dev_);
  MLACONF_CUDA_CHECK(cudaEventRecord(r.join, r.stream));
  MLACONF_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(main_), r.join, 0));
  joined_ = true;  // only once the wait is queued: a failed join is tried again by the destructor
}
SideStream::~SideStream() {
  if (joined_) return;
  try {
    join();
  } catch (...) {  // a destructor does not throw; the error stays pending for the next check
  }
}

void CudaGraph::begin_capture() {
  if (g_stream) throw CudaError("CudaGraph::capture: a capture is already running on this thread");
  if (exec_) {
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = nullptr;
  }
  dev_ = current_device();
  cudaStream_t s;
  MLACONF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // Work queued before the capture (uploads of the step's inputs) stays before it: the legacy stream
  // is drained first; the capture then starts from an empty stream.
  MLACONF_CUDA_CHECK(cudaStreamSynchronize(0));
  const cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    cudaStreamDestroy(s);
    MLACONF_CUDA_CHECK(e);
  }
  stream_ = s;
  g_stream = s;
}
void CudaGraph::abort_capture() {
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  g_stream = 0;
  stream_ = nullptr;
  if (!s) return;
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(s, &g);
  if (g) cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  cudaGetLastError();  // the capture's error is the exception being thrown
}
void CudaGraph::end_capture() {
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  g_stream = 0;
  stream_ = nullptr;
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(s, &g);
  cudaStreamDestroy(s);
  if (e != cudaSuccess) {
    if (g) cudaGraphDestroy(g);
    MLACONF_CUDA_CHECK(e);
  }
  cudaGraphExec_t x = nullptr;
  const cudaError_t ei = cudaGraphInstantiate(&x, g, 0);
  cudaGraphDestroy(g);
  MLACONF_CUDA_CHECK(ei);
  exec_ = x;
}
void CudaGraph::launch() {
  if (!exec_) throw CudaError("CudaGraph::launch: nothing captured");
  DeviceScope on(dev_);
  MLACONF_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), 0));
}
CudaGraph::~CudaGraph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}
CudaGraph::CudaGraph(CudaGraph&& o) noexcept
    : exec_(std::exchange(o.exec_, nullptr)), stream_(std::exchange(o.stream_, nullptr)), dev_(o.dev_) {}
CudaGraph& CudaGraph::operator=(CudaGraph&& o) noexcept {
  if (this != &o) {
    if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = std::exchange(o.exec_, nullptr);
    stream_ = std::exchange(o.stream_, nullptr);
    dev_ = o.dev_;
  }
  return *this;
}

void copy_to_host(void* host, const void* d_src, size_t bytes) {
  if (bytes) MLACONF_CUDA_CHECK(cudaMemcpy(host, d_src, bytes, cudaMemcpyDeviceToHost));
}

uint16_t float_to_half_bits(float f) {
  __half h = __float2half_rn(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
float half_bits_to_float_host(uint16_t h) { return half_bits_to_float(h); }

int device_sm_count() {
  static const int n = [] {
    int dev = 0, sms = 0;
    MLACONF_CUDA_CHECK(cudaGetDevice(&dev));
    MLACONF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
  }();
  return n;
}

}  // namespace mlaconf::cuda
