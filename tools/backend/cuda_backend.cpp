// mlaconf tools/backend: the CUDA pipeline (optimized/pipeline.h) behind the Backend interface.
#include "core/error.h"
#include "tools/backend/backend.h"
#ifdef MLACONF_HAVE_CUDA
#include "optimized/faults.h"
#include "optimized/pipeline.h"
#endif

namespace mlaconf::be {
#ifdef MLACONF_HAVE_CUDA
namespace {

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

 private:
  static cuda::PipelineOptions options(const BackendOptions& o) {
    cuda::PipelineOptions po;
    static_cast<cuda::KernelConfig&>(po) = o.kernels;
    po.max_ctx = o.max_ctx;
    po.devices = o.devices;
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
#else
std::unique_ptr<Backend> make_cuda_backend(const GgufFile&, const ModelConfig&, const BackendOptions&) {
  throw NotSupported("cuda backend: built without CUDA (configure with -DMLACONF_CUDA=ON and nvcc)");
}
#endif

}  // namespace mlaconf::be
