// mlaconf tools/backend: the CUDA pipeline (optimized/pipeline.h) behind the Backend interface.
#include "core/error.h"
#include "tools/backend/backend.h"
#ifdef MLACONF_HAVE_CUDA
#include "optimized/copy_bandwidth.h"
#include "optimized/faults.h"
#include "optimized/pipeline.h"
#endif

namespace mlaconf::be {
#ifdef MLACONF_HAVE_CUDA
namespace {

// The bandwidth measurement (measure_copy_bandwidth_gbs): 256 MiB (far beyond any L2), the best of 5 copies.
constexpr size_t kBandwidthCopyBytes = size_t{256} << 20;
constexpr int kBandwidthRepeats = 5;

class CudaBackend : public Backend {
 public:
  CudaBackend(const GgufFile& f, const ModelConfig& c, const BackendOptions& o)
      : fault_(o.fault), p_(f, c, options(o)), vocab_(c.n_vocab) {}
  std::string name() const override { return "cuda"; }
  std::string precision() const override { return "f16"; }
  std::string describe() const override {
    const std::string split = p_.split_summary();
    return "cuda" + (split.empty() ? std::string() : " (" + split + ")") +
           (fault_.empty() || fault_ == "none" ? std::string() : " (fault: " + fault_ + ")");
  }
  int64_t n_past() const override { return p_.n_past(); }
  std::vector<double> forward(std::span<const int32_t> ids, Trace* trace, const ForcedDecisions* forced) override {
    std::vector<float> lg = p_.forward(ids, trace, forced);  // [T, vocab]
    return std::vector<double>(lg.end() - vocab_, lg.end());
  }
  void reset() override { p_.reset(); }
  Tensors replay(int layer, const std::string& op, const Tensors& in, int64_t pos0) override {
    std::map<std::string, cuda::OpTensor> cin;
    for (const auto& [k, t] : in) cin[k] = cuda::OpTensor{t.shape, t.v};
    Tensors out;
    for (auto& [k, t] : p_.replay_op(layer, op, cin, pos0)) out[k] = HostTensor{std::move(t.shape), std::move(t.v)};
    return out;
  }

  int open_sequence() override { return p_.open_sequence(); }
  void close_sequence(int seq) override { p_.close_sequence(seq); }
  void append_synthetic_context(int seq, int64_t n, uint64_t seed) override { p_.append_synthetic_context(seq, n, seed); }
  std::vector<double> prefill(int seq, std::span<const int32_t> ids) override {
    const std::vector<float> lg = p_.prefill(seq, ids);  // [T, vocab]
    if (lg.empty()) return {};
    return std::vector<double>(lg.end() - vocab_, lg.end());
  }
  std::vector<int32_t> decode_step_greedy(std::span<const int> seqs, std::span<const int32_t> ids) override {
    return p_.decode_step_greedy(seqs, ids);
  }
  std::vector<std::vector<int32_t>> decode_steps_greedy(std::span<const int> seqs, std::span<const int32_t> ids,
                                                        int64_t n) override {
    return p_.decode_steps_greedy(seqs, ids, n);
  }
  int64_t graph_replays() const override { return p_.graph_replays(); }
  DecodeSettings decode_settings() const override {
    return DecodeSettings{p_.options().decode_graph, p_.options().batch_invariant, p_.split_summary()};
  }

 private:
  static cuda::PipelineOptions options(const BackendOptions& o) {
    cuda::PipelineOptions po;
    static_cast<cuda::KernelConfig&>(po) = o.kernels;
    po.max_ctx = o.max_ctx;
    po.devices = o.devices;
    po.max_seqs = o.max_seqs;
    po.overflow_check = o.overflow_check;
    return po;
  }
  std::string fault_;
  cuda::Pipeline p_;
  int64_t vocab_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const GgufFile& f, const ModelConfig& c, const BackendOptions& o) {
  std::string why;
  if (!cuda::cuda_available(&why)) throw NotSupported("cuda backend: " + why);
  if (c.rope_scaling_factor > 1.0)
    throw NotSupported("cuda backend: YaRN RoPE scaling (factor " + std::to_string(c.rope_scaling_factor) + ") is not implemented");
  cuda::set_fault(o.fault);  // InputError for an unknown name; stays on for this process
  return std::make_unique<CudaBackend>(f, c, o);
}

double measure_copy_bandwidth_gbs(int device) {
  std::string why;
  if (!cuda::cuda_available(&why)) throw NotSupported("copy bandwidth: " + why);
  return cuda::measure_copy_bandwidth_gbs(device, kBandwidthCopyBytes, kBandwidthRepeats);
}
#else
std::unique_ptr<Backend> make_cuda_backend(const GgufFile&, const ModelConfig&, const BackendOptions&) {
  throw NotSupported("cuda backend: built without CUDA (configure with -DMLACONF_CUDA=ON and nvcc)");
}
double measure_copy_bandwidth_gbs(int) {
  throw NotSupported("copy bandwidth: built without CUDA (configure with -DMLACONF_CUDA=ON and nvcc)");
}
#endif

}  // namespace mlaconf::be
