// mlaconf CLI: the reference and CUDA backends (see cli_backend.h).
#include "tools/cli_backend.h"

#include "reference/model.h"
#ifdef MLACONF_HAVE_CUDA
#include "optimized/faults.h"
#include "optimized/pipeline.h"
#endif

namespace mlaconf::cli {
namespace {

template <class S>
class ReferenceBackend : public Backend {
 public:
  ReferenceBackend(const GgufFile& f, const ModelConfig& c, size_t expert_bytes, bool dense)
      : m_(f, c, options(expert_bytes, dense)), dense_(dense) {}
  std::vector<double> next_logits(const std::vector<int32_t>& ids) override {
    ref::Mat<S> lg = m_.forward_last(ids);
    std::vector<double> out(static_cast<size_t>(lg.cols()));
    for (Eigen::Index v = 0; v < lg.cols(); ++v) out[v] = static_cast<double>(lg(lg.rows() - 1, v));
    return out;
  }
  void reset() override { m_.reset(); }
  std::string describe() const override {
    return std::string("reference ") + (sizeof(S) == 8 ? "f64" : "f32") + (dense_ ? " (fault: dense-attention)" : "");
  }

 private:
  static ref::ModelOptions options(size_t expert_bytes, bool dense) {
    ref::ModelOptions o;
    o.expert_cache_bytes = expert_bytes;
    o.dense_attention = dense;
    return o;
  }
  ref::Model<S> m_;
  bool dense_;
};

#ifdef MLACONF_HAVE_CUDA
class CudaBackend : public Backend {
 public:
  CudaBackend(const GgufFile& f, const ModelConfig& c, int64_t ctx, const std::string& fault, const std::vector<int>& devices)
      : fault_(fault), p_(f, c, options(ctx, devices)), vocab_(c.n_vocab) {}
  std::vector<double> next_logits(const std::vector<int32_t>& ids) override {
    std::vector<float> lg = p_.forward(ids);  // [T, vocab]
    return std::vector<double>(lg.end() - vocab_, lg.end());
  }
  void reset() override { p_.reset(); }
  std::string describe() const override {
    const std::string split = p_.split_summary();
    return "cuda" + (split.empty() ? std::string() : " (" + split + ")") +
           (fault_.empty() || fault_ == "none" ? std::string() : " (fault: " + fault_ + ")");
  }

 private:
  static cuda::PipelineOptions options(int64_t ctx, const std::vector<int>& devices) {
    cuda::PipelineOptions o;
    o.max_ctx = ctx;
    o.devices = devices;
    return o;
  }
  std::string fault_;
  cuda::Pipeline p_;
  int64_t vocab_;
};
#endif

}  // namespace

std::unique_ptr<Backend> make_reference_backend(const std::string& precision, double expert_cache_gib,
                                                const GgufFile& f, const ModelConfig& c, bool dense) {
  const size_t bytes = static_cast<size_t>(expert_cache_gib * double(1ull << 30));
  if (precision == "f64") return std::make_unique<ReferenceBackend<double>>(f, c, bytes, dense);
  return std::make_unique<ReferenceBackend<float>>(f, c, bytes, dense);
}

std::unique_ptr<Backend> make_cuda_backend(const std::string& who, const std::string& fault, const GgufFile& f,
                                           const ModelConfig& c, int64_t ctx, const std::vector<int>& devices) {
#ifdef MLACONF_HAVE_CUDA
  std::string why;
  if (!cuda::cuda_available(&why)) throw NotSupported(who + ": " + why);
  cuda::set_fault(fault);  // InputError for an unknown name; stays on for this process
  return std::make_unique<CudaBackend>(f, c, ctx, fault, devices);
#else
  (void)fault, (void)f, (void)c, (void)ctx, (void)devices;
  throw NotSupported(who + ": built without CUDA (configure with -DMLACONF_CUDA=ON and nvcc)");
#endif
}

}  // namespace mlaconf::cli
