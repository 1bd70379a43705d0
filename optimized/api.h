// mlaconf optimized: the C++ API of the CUDA kernels, usable from translation units compiled without
// nvcc (tests, tools). All pointers named d_* are device pointers; halves travel as uint16_t bits.
//
// Every launcher checks its arguments (InputError for bad shapes or types), checks every CUDA return
// code (CudaError naming the call) and runs on the legacy default stream; results are complete
// after synchronize().
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ggml_types.h"
#include "optimized/kernel_config.h"

#ifdef __CUDACC__
#define MLACONF_HD __host__ __device__
#else
#define MLACONF_HD
#endif

namespace mlaconf::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// True when a CUDA device can be used; otherwise why_not says why ("no CUDA device", driver error).
bool cuda_available(std::string* why_not);
void synchronize();  // cudaDeviceSynchronize, checked

// ---- devices (a layer split runs each layer on its device; kernels and allocations use the current one) --
int device_count();
int current_device();
void set_device(int ordinal);  // cudaSetDevice, checked (InputError for an ordinal that does not exist)
// Makes `ordinal` current for its lifetime, then restores the previous device.
class DeviceScope {
 public:
  explicit DeviceScope(int ordinal);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_;
};
// Lets each device of the list read the others' memory directly where the hardware can (NVLink / PCIe
// P2P); copies between the others are staged by the driver. Repeated ordinals are skipped.
void enable_peer_access(const std::vector<int>& ordinals);
// Copies `bytes` from d_src on device `src` to d_dst on device `dst` (cudaMemcpyPeerAsync on dst's legacy
// default stream), after all the work queued so far on src (an event) and before all work queued later
// on dst. src == dst (virtual devices of one GPU) takes the same path. Leaves dst current.
void copy_peer(void* d_dst, int dst, const void* d_src, int src, size_t bytes);

// Device memory, owned, on the device current at construction. Newly allocated buffers are poisoned (0xFF bytes: NaN in f16 and f32) so a
// kernel that forgets to write an output is caught. Where the device has memory pools, allocation,
// poisoning and release are stream-ordered on its legacy default stream (cudaMallocAsync /
// cudaMemsetAsync / cudaFreeAsync from a pool that keeps freed memory): a pass's many short-lived
// buffers then cost no device synchronization (cudaFree and cudaMemset synchronize).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return p_; }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return n_; }
  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  void fill(uint8_t byte);  // memset

  // A view of `bytes` device bytes at p that belong to someone else (a pass arena, optimized/arena.h,
  // which poisons them): used like any buffer, frees nothing.
  static DeviceBuffer borrowed(void* p, size_t bytes);

 private:
  void release();
  void* p_ = nullptr;
  size_t n_ = 0;
  int dev_ = 0;         // the device it lives on
  bool pooled_ = false;  // from the device's stream-ordered pool
  bool borrowed_ = false;  // a view (borrowed()): release() frees nothing
};

// Changes whenever a kernel's scratch, ticket or top-k work memory is reallocated: a graph captured
// before holds the old addresses and must be captured again.
uint64_t workspace_generation();

// A CUDA graph of a piece of host code's GPU work (a decode step). capture(fn) runs fn with every
// launch, stream-ordered allocation / free and async copy of this thread on a capture stream of the
// current device (anything that would synchronize, a cudaMemcpy or cudaMalloc, fails the capture with
// CudaError) and instantiates the graph; launch() replays it on that device's legacy default stream,
// ordered with the work before and after it. Nothing runs during capture.
class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(CudaGraph&& o) noexcept;
  CudaGraph& operator=(CudaGraph&& o) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  template <class F>
  void capture(F&& fn) {
    begin_capture();
    try {
      fn();
    } catch (...) {
      abort_capture();
      throw;
    }
    end_capture();
  }
  void launch();
  bool ready() const { return exec_ != nullptr; }

 private:
  void begin_capture();
  void end_capture();
  void abort_capture();
  void* exec_ = nullptr;    // cudaGraphExec_t
  void* stream_ = nullptr;  // the capture stream (cudaStream_t) while capturing
  int dev_ = 0;
};

// Work queued beside the current stream's (a decode step's indexer beside its query path, which does not
// read it). The constructor forks: this device's side stream (non-blocking, one per device and host thread) waits for
// the work queued so far on the current stream. run(fn) queues fn's launches, async copies and
// stream-ordered allocations on the side stream, and gives its kernels their own scratch slots (scratch()
// keeps one set per stream lane). join() makes the current stream wait for the side stream; the
// destructor joins if join() was not called. Under a CudaGraph capture the side stream takes part in the
// capture: a fork and a join in the graph. fn must queue stream-ordered work only (a synchronous copy on
// the legacy stream would not wait for the side stream), and run() does not nest. The side lane's scratch
// slots and the indexer's work memory are per device, not per thread: one pipeline per device at a time.
class SideStream {
 public:
  SideStream();
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
  template <class F>
  void run(F&& fn) {
    enter();
    try {
      fn();
    } catch (...) {
      leave();
      throw;
    }
    leave();
  }
  // Fork again: the side stream also waits for the work queued on the forking stream since the last fork
  // (a decode step queues the indexer's key and weights, of x alone, before q_a, and its query after q_a_norm).
  void refork();
  void join();

 private:
  void fork();  // the side stream waits for the work queued so far on the forking stream
  void enter();
  void leave();
  void* main_ = nullptr;  // cudaStream_t: the stream that forked
  int dev_ = 0;
  bool joined_ = false;
};

template <class T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
  return b;
}
template <class T>
std::vector<T> to_host(const DeviceBuffer& b, size_t count) {
  std::vector<T> v(count);
  if (count) b.download(v.data(), count * sizeof(T));
  return v;
}

// Checked device-to-host copy of raw bytes.
void copy_to_host(void* host, const void* d_src, size_t bytes);

// Host-side half conversions (round to nearest even), for tests and uploads.
uint16_t float_to_half_bits(float f);
float half_bits_to_float_host(uint16_t h);

// ---- dequantization (optimized/dequant.cu) ------------------------------------------------------
// Every type of core's weight_types().
bool can_dequantize(GgmlType t);
// n values (a multiple of the block size) from raw ggml blocks at d_src.
void dequantize_f32(GgmlType t, const void* d_src, int64_t n, float* d_dst);
void dequantize_f16(GgmlType t, const void* d_src, int64_t n, uint16_t* d_dst);
// Row t of d_out [T, E] = row d_ids[t] (device) of a table of rows of E values (row_bytes each): the
// embedding lookup of a captured decode step, by the formulas of dequantize_f32.
void embed_rows(GgmlType t, const void* d_table, int64_t row_bytes, const int32_t* d_ids, int64_t T, int64_t E, float* d_out);
// The very same formulas run on the CPU (no device needed): lets CI check the formulas.
void dequantize_host(GgmlType t, const uint8_t* src, int64_t n, float* dst);

// ---- fused dequant GEMV and prefill GEMM (optimized/gemv.cu) --------------------------------------
// y[b][r] = sum_c W_b[r][c] * x[b][c].  W_b: n_rows rows of ncols values of type t, read directly as
// ggml blocks, at d_w + b * w_batch_stride bytes; x_b = d_x + b * x_stride (f32), y_b = d_y + b * y_stride.
// k: which kernels (KernelConfig::gemv; the pipeline passes its options', suites/gpu pins the one it checks).
void gemv(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const float* d_x, float* d_y,
          int64_t batch = 1, int64_t w_batch_stride = 0, int64_t x_stride = 0, int64_t y_stride = 0,
          GemvKernel k = GemvKernel::Default);
// All used experts of a token (or of a batch) in one launch: y_j = W[ids[j]] x_j for j < n, where
// expert e's matrix (n_rows x ncols, type t) starts at d_w + e * expert_stride bytes and ids [n] is on
// the device; x_j = d_x + j * x_stride (0: one x for all), y_j = d_y + j * y_stride.
// An id of -1 takes the matrix at d_w_alt instead (the same type and shape, 16-byte aligned): a shared expert
// run as one more entry of the launch, with the bits it has alone. Only where gemv_experts_mma_ok says so.
void gemv_experts(GgmlType t, const void* d_w, int64_t expert_stride, const int32_t* d_ids, int64_t n, int64_t n_rows,
                  int64_t ncols, const float* d_x, int64_t x_stride, float* d_y, int64_t y_stride,
                  const void* d_w_alt = nullptr, GemvKernel k = GemvKernel::Default);
// Whether gemv_experts takes d_w_alt, and gemv_experts_grouped runs, for this type and shape under the current
// kernels k (the tensor-core GEMV runs both).
bool gemv_experts_mma_ok(GgmlType t, int64_t n_rows, int64_t ncols, GemvKernel k = GemvKernel::Default);
// The (token, expert) pairs of a batched decode step grouped by expert, so that an expert picked by several
// tokens decodes its weights once for them (gemv_experts_grouped): n pairs (ids [n] expert ids, tok [n] their
// token rows) stably sorted by expert id into slots, ord [n] (slot s holds pair ord[s]) and tok_sorted [n]
// (= tok[ord[s]]); groups [n][4] (expert, first slot, end slot, 0) in slot order, *n_groups of them: an expert's
// slots [r0, r1) cut at every fourth slot from 2 floor(r0 / 2) on, so that each group lies in two slot pairs.
// One CTA, n <= kGroupPairsMax. Device pointers; nothing is read back.
constexpr int64_t kGroupPairsMax = 2048;
void group_pairs(const int32_t* d_ids, const int32_t* d_tok, int64_t n, int32_t* d_ord, int32_t* d_tok_sorted, int32_t* d_groups,
                 int32_t* d_n_groups);
// y_{out_rows[s]} = W[e] x_s for each slot s of each group (e, first, end) of group_pairs, x_s = d_x + s x_stride
// (the slots' x in slot order), y_r = d_y + r y_stride (out_rows null: r = s). Each group is one shared pass of
// its expert's matrix (gemv_mma), so each product has the bits of that x on that matrix alone. n: the slots;
// a launch sized for n groups (the count stays on the device: a CUDA graph can hold it).
void gemv_experts_grouped(GgmlType t, const void* d_w, int64_t expert_stride, int64_t n_rows, int64_t ncols,
                          const int32_t* d_groups, const int32_t* d_n_groups, int64_t n, const float* d_x, int64_t x_stride,
                          float* d_y, int64_t y_stride, const int32_t* d_out_rows, GemvKernel k = GemvKernel::Default);
// Per-head GEMV: y[b] = W[b % H] x[b] for b < batch; W[h] (rows x cols, type t) at d_w + h * rows * row bytes;
// x[b] = d_x + b * x_stride, y[b] = d_y + b * y_stride.
void gemv_per_head(GgmlType t, const void* d_w, int64_t rows, int64_t cols, int64_t H, const float* d_x, int64_t x_stride,
                   float* d_y, int64_t y_stride, int64_t batch, GemvKernel k = GemvKernel::Default);
// Y [T, n_rows] f32 = X [T, ncols] f16 times W^T, W [n_rows, ncols] f16 row-major: cuBLAS, fp32 accumulate.
void gemm_f16(const uint16_t* d_x, const uint16_t* d_w, int64_t T, int64_t n_rows, int64_t ncols, float* d_y);
// Prefill linear: dequantize W to an fp16 scratch buffer, then gemm_f16. X [T, ncols] f32 is split into
// fp16 hi + lo parts (two GEMMs, one accumulator), so activations keep ~22 bits; W is fp16.
void linear_prefill(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const float* d_x, int64_t T,
                    float* d_y, DeviceBuffer* scratch);
// Tensor-core variant with ~22-bit weights and activations: W and X each split into fp16 hi + lo, three
// fp16 GEMMs (Xh.Wh + Xl.Wh + Xh.Wl) into one fp32 accumulator. The pipeline's default prefill.
void linear_prefill_x3(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const float* d_x, int64_t T,
                       float* d_y, DeviceBuffer* scratch);
// The fp32 variant (the indexer's projections): W dequantized to fp32, fp32 GEMM (no TF32).
void linear_prefill_f32(GgmlType t, const void* d_w, int64_t n_rows, int64_t ncols, const float* d_x, int64_t T,
                        float* d_y, DeviceBuffer* scratch);
// x -> hi = fp16(x), lo = fp16(x - hi).
void split_half(const float* d_x, int64_t n, uint16_t* d_hi, uint16_t* d_lo);

// ---- small ops (optimized/ops.cu) ---------------------------------------------------------------
// y[t] = w * x[t] / sqrt(mean(x[t]^2) + eps).  x, y [T, D] f32 (row stride ld for x and y), w [D] f32.
void rmsnorm(const float* d_x, const float* d_w, int64_t T, int64_t D, int64_t ld, float eps, float* d_y);
// The residual add and the RMSNorm after it in one launch: h += delta, then y = rmsnorm(h) (h, delta,
// y [T, D]); the same bits as add_inplace then rmsnorm.
void add_rmsnorm(float* d_h, const float* d_delta, const float* d_w, int64_t T, int64_t D, float eps, float* d_y);
// LayerNorm with bias, biased variance.
void layernorm(const float* d_x, const float* d_w, const float* d_b, int64_t T, int64_t D, float eps, float* d_y);
// In-place RoPE on x [T, n_vec, stride] f32: values [col0, col0 + dim) of each vector, position pos[t].
// Angles pos * theta^(-2i/dim) in double. neox = false: pairs (2i, 2i+1); true: pairs (i, i + dim/2).
void rope(float* d_x, int64_t T, int64_t n_vec, int64_t stride, int64_t col0, int64_t dim, const int32_t* d_pos,
          double theta, bool neox);
// layernorm (eps, D values per row) then RoPE on values [0, dim) of each row (n_vec 1, stride D, position pos[t]) in
// one launch: the same bits as layernorm() then rope(). The rows go to y [T, D] and, where d_idx is not null, also
// to dst row idx[t] (stride ld_dst), as scatter_rows() would put them. D <= 8192.
void layernorm_rope(const float* d_x, const float* d_w, const float* d_b, int64_t T, int64_t D, float eps, const int32_t* d_pos,
                    int64_t dim, double theta, bool neox, float* d_y, const int32_t* d_idx = nullptr, float* d_dst = nullptr,
                    int64_t ld_dst = 0);
// out = silu(gate) * up, elementwise, n values.
void silu_gate(const float* d_gate, const float* d_up, int64_t n, float* d_out);
// f32 -> f16 bits, n values.
void to_half(const float* d_x, int64_t n, uint16_t* d_y);
// y += x (n values); x *= s.
void add_inplace(float* d_y, const float* d_x, int64_t n);
void scale_inplace(float* d_x, int64_t n, float s);
// dst[r] = src[idx[r]] for r < n (rows of `cols` floats; strides ld_src / ld_dst). idx on the device.
void gather_rows(const float* d_src, int64_t ld_src, const int32_t* d_idx, int64_t n, int64_t cols, float* d_dst,
                 int64_t ld_dst);
// dst[idx[r]] = src[r] for r < n.
void scatter_rows(const float* d_src, int64_t ld_src, const int32_t* d_idx, int64_t n, int64_t cols, float* d_dst,
                  int64_t ld_dst);
// out[t] = sum_j w[t,j] * x[t,j,:] (+ add[t] when add is not null).  x [T, k, E], w [T, k] (device).
// residual (optional, [T, E]): residual += out as well (the layer's residual add, same bits, no launch).
void weighted_combine(const float* d_x, const float* d_w, int64_t T, int64_t k, int64_t E, const float* d_add, float* d_out,
                      float* d_residual = nullptr);
// Device-to-device 2-D copy: rows of `width_bytes` bytes (cudaMemcpy2D).
void copy2d(void* d_dst, size_t dst_pitch, const void* d_src, size_t src_pitch, size_t width_bytes, size_t rows);
// Greedy pick of each row of x [rows, n]: out[r] = the lowest index of the row's largest non-NaN value
// (-1 for an all-NaN row): core/argmax.h's rule (ties to the lower id, -0 == +0), on the device, so that a
// decode loop downloads B ids instead of B x vocab logits and scans nothing on the host.
void argmax_rows(const float* d_x, int64_t rows, int64_t n, int32_t* d_out);
// The next decode step's token ids from this step's greedy picks, on the device (chained greedy steps):
// ids[b] = picks[b], or 0 where picks[b] is -1 (a row of NaN logits), so that the step queued behind it
// embeds a real row; the host, which sees the -1 one step later, discards that step (decode_steps_greedy).
void feed_picks(const int32_t* d_picks, int64_t B, int32_t* d_ids);
// Counts non-finite values of x[0..n) (returns the count; synchronizes).
int64_t count_nonfinite(const float* d_x, int64_t n);

// ---- sparse MLA, absorbed form (optimized/sparse_mla.cu) ------------------------------------------
// q [T, H, d_qk] f16; cache [L, d_qk] f16 (shared latent rows; 64-bit offsets); idx [T, top_k] i32,
// -1 = no token (skipped), otherwise < L. out [T, H, d_v] f32 = softmax(scale * q . k) over the listed
// rows times their first d_v values. A query with no valid index gives zeros. Split-K over the index
// list (chunks of `split` entries, 0 = automatic) with a log-sum-exp merge.
// q_pos [T] (may be null) is each query's position: only the fault "dense-attention" reads it.
//
// Batched decode is the same call: the T rows are then B queries of B independent sequences, each with
// its own region of one shared, paged latent cache, and idx holds absolute rows of that cache (a
// sequence's page table resolved to rows), so each query reads only its own sequence's rows. row_base
// [T] (may be null = 0) is where each query's sequence starts: the dense fault attends to rows
// row_base[t] .. row_base[t] + q_pos[t] (a contiguous region; the fault is a test device, not paging-aware).
//
// d_qk = 576, d_v = 512 (GLM-5, DeepSeek V3.2) run a tensor-core kernel (mma.sync, ldmatrix): a CTA
// takes 16 or 32 heads of one query (heads_per_cta 16 or 32; 0: 32 from plans of 8 queries, else 16; rows by
// bulk copies, each warp scoring 8 rows of a tile over all dims for 16 heads, the same bits either way) and a
// split of its list; up to 4 split-K
// partials are merged by the last CTA of each (query, head block), more by a merge kernel. Other sizes
// run a SIMT kernel.
struct SparseMlaArgs {
  const uint16_t* q = nullptr;
  const uint16_t* cache = nullptr;
  int64_t L = 0;
  const int32_t* idx = nullptr;
  const int32_t* q_pos = nullptr;
  int64_t T = 0, H = 0, d_qk = 0, d_v = 0, top_k = 0;
  float scale = 0;
  int64_t split = 0;
  float* out = nullptr;
  const int32_t* row_base = nullptr;
  int heads_per_cta = 0;
  // Plan (heads per CTA, automatic split) as for a call of this many queries (0 = T): a batched decode
  // passes 1, so that each query is computed exactly as when it runs alone, whatever the batch.
  int64_t plan_queries = 0;
};
void sparse_mla(const SparseMlaArgs& a);
// out_v [T, H, v] = per head W_UV[h] (v x d_v, type t, ggml blocks, head stride in bytes) times latent [T, H, d_v].
void apply_wuv(GgmlType t, const void* d_wuv, int64_t v, int64_t d_v, const float* d_latent, int64_t T, int64_t H,
               float* d_out, GemvKernel k = GemvKernel::Default);

// ---- test data made on the device (a multi-GB cache is filled without a host copy) --------------------
// The f16 bits of pattern value (row, col) under `seed`: uniform in about [-1, 1], the same on host and device.
MLACONF_HD inline uint16_t pattern_half_bits(uint64_t seed, int64_t row, int64_t col) {
  uint64_t z = seed ^ ((uint64_t)row * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)col * 0xC2B2AE3D27D4EB4Full);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  // sign, exponent 2^-4 .. 2^-1, 10 random mantissa bits: |value| in [1/16, 1)
  const uint16_t sign = (uint16_t)((z >> 63) << 15);
  const uint16_t exp = (uint16_t)(11 + ((z >> 10) & 3));  // 2^-4 .. 2^-1 times 1.m
  return (uint16_t)(sign | (exp << 10) | (z & 0x3ff));
}
// d_x [rows, cols] f16 = pattern_half_bits(seed, r, c).
void fill_pattern_f16(uint16_t* d_x, int64_t rows, int64_t cols, uint64_t seed);

// ---- MoE routing (device: optimized/route.cu; host: optimized/route_host.cpp) -----------------------
// Per row t of logits [T, n_expert] (fp32): gating probabilities (softmax or sigmoid), choice =
// probability + bias (bias may be null), the group limit (n_groups > 1: keep the groups_used groups whose
// two best choices sum highest, ties to the lower group), the k best choices (ties to the lower id), ids
// ascending; weights = their probabilities (normalized when norm) times scale. Outputs [T, k]: ids, wts,
// and tok = t (each pair's token row).
//
// route_experts runs it on the device (pointers on the device; a decode step's routing without a host
// round trip); route_experts_host on the host (host pointers; tok may be null), the pipeline's routing
// where it records or forces decisions. Both make the same float operations in the same order (exp in
// double rounded to float on both sides; the softmax normaliser summed sequentially in expert order), so
// that they select the same experts with the same weights, bit for bit (suites/gpu route_experts.*).
// NaN logits: unspecified (the host's sorts have no order for them).
struct RouteArgs {
  const float* logits = nullptr;
  int64_t T = 0, n_expert = 0, k = 0;
  const float* bias = nullptr;
  bool softmax = false;
  int64_t n_groups = 0, groups_used = 0;
  bool norm = false;
  float scale = 1.f;
  int32_t* ids = nullptr;
  float* wts = nullptr;
  int32_t* tok = nullptr;
  // route_experts only: ids[T * k] = -1 too (ids then holds T k + 1), the shared expert as one more entry of the
  // experts' launch (a one-token step). Written by the routing's own launch: in a traced decode step a memset node
  // for it held the graph's next kernel back 4-9 us (H200, docs/perf/h200-2026-12-02.md v18).
  bool shared_tail = false;
};
void route_experts(const RouteArgs& a);
// InputError for a shape neither can route (k outside [1, n_expert], groups that do not divide the
// experts or groups_used outside [1, n_groups]); both entry points call it.
void check_route_args(const RouteArgs& a);
// Also, where not null: gap [T] = k-th minus (k+1)-th best choice (+inf when k == n_expert), and the
// gating probabilities probs [T, n_expert].
void route_experts_host(const RouteArgs& a, double* gap = nullptr, float* probs = nullptr);
// The weights of given ids [T, k] (a.ids, e.g. forced ones) from probs [T, n_expert]: into a.wts.
void route_weights_host(const RouteArgs& a, const float* probs);

// ---- the paged latent cache of batched decode (optimized/paged.cu) -----------------------------------
// dst [rows of d halves] row rows[t] = fp16(src [T, d] row t) (round to nearest even, as to_half).
void to_half_rows(const float* d_src, int64_t T, int64_t d, const int32_t* d_rows, uint16_t* d_dst);
// In place, idx [T, K]: a position p >= 0 of row t's sequence becomes its absolute cache row
// tab[row_tab[t] * max_pages + p / page_rows] * page_rows + p % page_rows; -1 (and a position past
// the table, or an unmapped page -1) stays / becomes -1. The order of each list is kept.
void paged_rows(int32_t* d_idx, int64_t T, int64_t K, const int32_t* d_row_tab, const int32_t* d_tab, int64_t max_pages,
                int64_t page_rows);
// d_x [rows, cols] f32 = the values of pattern_half_bits(seed, r, c) (benchmark contexts).
void fill_pattern_f32(float* d_x, int64_t rows, int64_t cols, uint64_t seed);

// ---- DSA lightning indexer (optimized/indexer.cu) ------------------------------------------------
// scores [T, L] f32: sum_h w[t,h] * relu(q[t,h] . k[s]) for s <= q_pos[t], -inf above.
// q [T, Hi, Di] f16, k [L, Di] f16, w [T, Hi] f32 (already scaled).
void indexer_scores(const uint16_t* d_q, const uint16_t* d_k, const float* d_w, const int32_t* d_qpos, int64_t T,
                    int64_t Hi, int64_t Di, int64_t L, float* d_scores);
// Batched decode: T queries of T sequences, query t's keys at d_k + t * k_stride (elements; 0 = one key
// set for all) and L keys each (q_pos[t], the position in its own sequence, masks the rest). fp16 with
// Di = 128 and Hi = 32 or 64 runs on tensor cores (mma.sync, fp32 accumulate).
void indexer_scores_batched(const uint16_t* d_q, const uint16_t* d_k, int64_t k_stride, const float* d_w,
                            const int32_t* d_qpos, int64_t T, int64_t Hi, int64_t Di, int64_t L, float* d_scores);
// The same with fp32 q [T, Hi, Di] and keys [L, Di] (the pipeline's indexer). Each score is fp32
// products and sums in a fixed order (optimized/indexer.cu): bit-identical whatever T, L or the rows.
void indexer_scores_f32(const float* d_q, const float* d_k, const float* d_w, const int32_t* d_qpos, int64_t T, int64_t Hi,
                        int64_t Di, int64_t L, float* d_scores);
// The same per query row t with its own keys at d_k + k_off[t] (elements; device array [T]): B
// sequences of a batched decode, each scoring its own key region (L keys, q_pos masking the rest).
// Each score is computed exactly as by indexer_scores_f32 on that region alone.
void indexer_scores_f32_rows(const float* d_q, const float* d_k, const int64_t* d_k_off, const float* d_w, const int32_t* d_qpos,
                             int64_t T, int64_t Hi, int64_t Di, int64_t L, float* d_scores);
// indexer_scores_f32_rows (d_k_off set; nullptr: indexer_scores_f32, keys shared by all rows) and then
// topk_rows of those scores into d_out [T, k], with the same scores and selection; where the multi-CTA
// top-k runs (L >= 16384, k <= 3072), its first histogram pass is fused into the scores kernel (two
// launches in all instead of three).
void indexer_topk_f32_rows(const float* d_q, const float* d_k, const int64_t* d_k_off, const float* d_w, const int32_t* d_qpos,
                           int64_t T, int64_t Hi, int64_t Di, int64_t L, int64_t k, float* d_scores, int32_t* d_out);
// The selections of indexer_topk_f32_rows, index for index, without its scores (d_scores [T, L] is work
// memory, its contents unspecified afterwards): where Di = 128, Hi = 32 or 64, L >= 16384 and k <= 3072,
// fp16 tensor-core scores with an error bound pick the keys that can be selected and only those get the
// fp32 kernel's exact score (docs/CUDA.md); elsewhere indexer_topk_f32_rows itself. The decode step's call.
void indexer_select_f32_rows(const float* d_q, const float* d_k, const int64_t* d_k_off, const float* d_w, const int32_t* d_qpos,
                             int64_t T, int64_t Hi, int64_t Di, int64_t L, int64_t k, float* d_scores, int32_t* d_out);
// The SIMT kernel the fp32 entry points fall back to (Di % 4 != 0, Hi > 64), forced for every shape: the
// tiled kernel they run otherwise must give the same bits (suites/gpu, kernel_bench's check). T <= 65535.
void indexer_scores_f32_simt(const float* d_q, const float* d_k, const int64_t* d_k_off, const float* d_w, const int32_t* d_qpos,
                             int64_t T, int64_t Hi, int64_t Di, int64_t L, float* d_scores);
// Per row of scores [T, L]: the k largest finite entries (ties to the lower index), written ascending,
// -1 padded when a row has fewer than k finite entries. Radix select, no sort. out [T, k] i32.
void topk_rows(const float* d_scores, int64_t T, int64_t L, int64_t k, int32_t* d_out);

}  // namespace mlaconf::cuda
