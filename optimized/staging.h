// mlaconf optimized: a pass's small host-to-device inputs (token ids, positions, row tables) as ONE
// asynchronous copy from pinned memory, instead of one synchronous cudaMemcpy each; and small results
// (greedy picks) downloaded the same way, read by the host only when it needs them.
//
// Why: a cudaMemcpy from pageable memory waits for the stream to drain and for a staging copy; a decode
// step made 6 to 7 of them before its first kernel (CUPTI on the H200: ~35 us of host time each, the
// device idle meanwhile). Packed into one image and copied with cudaMemcpyAsync from a pinned buffer,
// they cost one call that does not wait.
//
//   PinnedUpload up;                               // one per device that receives (its event is that device's)
//   const size_t o_ids = up.add(ids.data(), B * 4), o_pos = up.add(pos.data(), B * 4);
//   DeviceBuffer d = temp_buffer(up.bytes());      // or a persistent buffer of that size
//   up.upload(d.get());                            // queued on the current device's legacy default stream
//   ... d.as<char>() + o_ids ...                   // kernels queued after it read the values
#pragma once
#include <cstddef>
#include <vector>

namespace mlaconf::cuda {

class PinnedUpload {
 public:
  static constexpr size_t kAlign = 256;  // each part where a buffer of its own would start
  PinnedUpload() = default;
  ~PinnedUpload();
  PinnedUpload(PinnedUpload&& o) noexcept;
  PinnedUpload& operator=(PinnedUpload&& o) noexcept;
  PinnedUpload(const PinnedUpload&) = delete;
  PinnedUpload& operator=(const PinnedUpload&) = delete;

  // Appends `bytes` from host at the next kAlign-aligned offset of the image (copied now); its offset.
  size_t add(const void* host, size_t bytes);
  size_t bytes() const { return image_.size(); }
  // Drops what was added and not uploaded (an image left behind by an error): callers start with it.
  void clear() { image_.clear(); }
  // One cudaMemcpyAsync of the image to d_dst (device memory of the current device, at least bytes())
  // on that device's legacy default stream, from this object's pinned buffer; then the image is empty
  // (also when it throws).
  // The pinned buffer is reused: the call first waits for this object's previous copy to finish (done
  // long before in a pass that ends with a synchronous download). CudaError while a CudaGraph captures
  // (the graph would read the pinned buffer when replayed) or on another device than the first call's.
  void upload(void* d_dst);

 private:
  void release();
  std::vector<unsigned char> image_;
  void* host_ = nullptr;  // pinned, cap_ bytes
  size_t cap_ = 0;
  void* event_ = nullptr;  // cudaEvent_t recorded after the last copy
  int dev_ = -1;
};

// The download side: start() queues one cudaMemcpyAsync of `bytes` from device memory into this object's
// pinned buffer on the current device's legacy default stream and returns at once; wait() blocks until
// that copy (and all the work queued before it) has finished and returns the bytes. Chained decode steps
// (Pipeline::decode_steps_greedy) download one step's picks while the next step runs.
//   PinnedDownload d;  d.start(d_picks, B * 4);  ... queue more work ...  const void* p = d.wait();
class PinnedDownload {
 public:
  PinnedDownload() = default;
  ~PinnedDownload();
  PinnedDownload(PinnedDownload&& o) noexcept;
  PinnedDownload& operator=(PinnedDownload&& o) noexcept;
  PinnedDownload(const PinnedDownload&) = delete;
  PinnedDownload& operator=(const PinnedDownload&) = delete;

  // CudaError while a CudaGraph captures, or while a previous start() has not been waited for.
  void start(const void* d_src, size_t bytes);
  const void* wait();
  bool pending() const { return pending_; }

 private:
  void release();
  void* host_ = nullptr;  // pinned, cap_ bytes
  size_t cap_ = 0;
  void* event_ = nullptr;  // cudaEvent_t recorded after the copy
  bool pending_ = false;
};

}  // namespace mlaconf::cuda
