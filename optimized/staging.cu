// mlaconf optimized: packed uploads from pinned memory (optimized/staging.h says why).
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "optimized/common.cuh"
#include "optimized/staging.h"

namespace mlaconf::cuda {

size_t PinnedUpload::add(const void* host, size_t bytes) {
  const size_t off = round_up(image_.size(), kAlign);
  image_.resize(off + bytes);
  if (bytes) std::memcpy(image_.data() + off, host, bytes);
  return off;
}

void PinnedUpload::upload(void* d_dst) {
  struct Clear {
    std::vector<unsigned char>& v;
    ~Clear() { v.clear(); }
  } clear{image_};
  if (capturing()) throw CudaError("PinnedUpload::upload while a CUDA graph captures");
  if (stream_lane()) throw CudaError("PinnedUpload::upload inside SideStream::run (it copies on the legacy stream)");
  const size_t n = image_.size();
  if (n == 0) return;
  const int dev = current_device();
  if (dev_ >= 0 && dev != dev_)
    throw CudaError("PinnedUpload::upload on device " + std::to_string(dev) + ", first used on " + std::to_string(dev_));
  cudaEvent_t ev = static_cast<cudaEvent_t>(event_);
  if (ev) MLACONF_CUDA_CHECK(cudaEventSynchronize(ev));  // the previous copy has read the pinned buffer
  if (cap_ < n) {
    if (host_) MLACONF_CUDA_CHECK(cudaFreeHost(host_));
    host_ = nullptr, cap_ = 0;
    const size_t cap = std::max<size_t>(2 * n, 4096);  // room for a growing table
    MLACONF_CUDA_CHECK(cudaHostAlloc(&host_, cap, cudaHostAllocPortable));
    cap_ = cap;
  }
  std::memcpy(host_, image_.data(), n);
  MLACONF_CUDA_CHECK(cudaMemcpyAsync(d_dst, host_, n, cudaMemcpyHostToDevice, 0));
  if (!ev) {
    MLACONF_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    event_ = ev, dev_ = dev;
  }
  MLACONF_CUDA_CHECK(cudaEventRecord(ev, 0));
}

// The pinned buffer outlives its last copy.
void PinnedUpload::release() {
  if (event_) {
    cudaEventSynchronize(static_cast<cudaEvent_t>(event_));
    cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  }
  if (host_) cudaFreeHost(host_);
  event_ = nullptr, host_ = nullptr, cap_ = 0, dev_ = -1;
}
PinnedUpload::~PinnedUpload() { release(); }
PinnedUpload::PinnedUpload(PinnedUpload&& o) noexcept
    : image_(std::move(o.image_)),
      host_(std::exchange(o.host_, nullptr)),
      cap_(std::exchange(o.cap_, 0)),
      event_(std::exchange(o.event_, nullptr)),
      dev_(std::exchange(o.dev_, -1)) {}
PinnedUpload& PinnedUpload::operator=(PinnedUpload&& o) noexcept {
  if (this != &o) {
    release();
    image_ = std::move(o.image_);
    host_ = std::exchange(o.host_, nullptr);
    cap_ = std::exchange(o.cap_, 0);
    event_ = std::exchange(o.event_, nullptr);
    dev_ = std::exchange(o.dev_, -1);
  }
  return *this;
}

void PinnedDownload::start(const void* d_src, size_t bytes) {
  if (capturing()) throw CudaError("PinnedDownload::start while a CUDA graph captures");
  if (pending_) throw CudaError("PinnedDownload::start before the previous download was waited for");
  if (cap_ < bytes) {
    if (host_) MLACONF_CUDA_CHECK(cudaFreeHost(host_));
    host_ = nullptr, cap_ = 0;
    MLACONF_CUDA_CHECK(cudaHostAlloc(&host_, std::max<size_t>(bytes, 256), cudaHostAllocPortable));
    cap_ = std::max<size_t>(bytes, 256);
  }
  if (!event_) {
    cudaEvent_t ev;
    MLACONF_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    event_ = ev;
  }
  if (bytes) MLACONF_CUDA_CHECK(cudaMemcpyAsync(host_, d_src, bytes, cudaMemcpyDeviceToHost, 0));
  MLACONF_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), 0));
  pending_ = true;
}

const void* PinnedDownload::wait() {
  if (pending_) {
    pending_ = false;  // waited for, also when the wait reports an error
    MLACONF_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
  }
  return host_;
}

void PinnedDownload::release() {
  if (event_) {
    cudaEventSynchronize(static_cast<cudaEvent_t>(event_));
    cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  }
  if (host_) cudaFreeHost(host_);
  event_ = nullptr, host_ = nullptr, cap_ = 0, pending_ = false;
}
PinnedDownload::~PinnedDownload() { release(); }
PinnedDownload::PinnedDownload(PinnedDownload&& o) noexcept
    : host_(std::exchange(o.host_, nullptr)),
      cap_(std::exchange(o.cap_, 0)),
      event_(std::exchange(o.event_, nullptr)),
      pending_(std::exchange(o.pending_, false)) {}
PinnedDownload& PinnedDownload::operator=(PinnedDownload&& o) noexcept {
  if (this != &o) {
    release();
    host_ = std::exchange(o.host_, nullptr);
    cap_ = std::exchange(o.cap_, 0);
    event_ = std::exchange(o.event_, nullptr);
    pending_ = std::exchange(o.pending_, false);
  }
  return *this;
}

}  // namespace mlaconf::cuda
