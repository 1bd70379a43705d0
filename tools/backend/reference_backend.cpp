// mlaconf tools/backend: the Eigen reference (reference/model.h) behind the Backend interface.
#include <algorithm>

#include "core/error.h"
#include "reference/model.h"
#include "reference/threads.h"
#include "tools/backend/backend.h"
#include "tools/backend/reference_replay.h"

namespace mlaconf::be {
namespace {

template <class S>
class ReferenceBackend : public Backend {
 public:
  ReferenceBackend(const GgufFile& f, const ModelConfig& c, const BackendOptions& o)
      : m_(f, c, options(o)), c_(c), dense_(o.fault == "dense-attention"), replay_(f, c, dense_) {}
  std::string name() const override { return "reference"; }
  std::string precision() const override { return sizeof(S) == 8 ? "f64" : "f32"; }
  std::string describe() const override {
    return "reference " + precision() + (dense_ ? " (fault: dense-attention)" : "");
  }
  int64_t n_past() const override { return pos_; }

  std::vector<double> forward(std::span<const int32_t> ids, Trace* trace, const ForcedDecisions* forced) override {
    const int64_t n = c_.n_layer_run();
    const int64_t l_end = range_.l_end < 0 ? n : range_.l_end;
    ref::Mat<S> out;
    if (range_.l_begin == 0 && l_end == n && range_.head) {
      out = range_.head_all_rows ? m_.forward(ids, trace, forced) : m_.forward_last(ids, trace, forced);
    } else {
      ref::Mat<S> h = m_.forward_layers(m_.embed(ids), pos_, range_.l_begin, l_end, trace, forced);
      if (range_.head) out = m_.head(range_.head_all_rows ? h : ref::Mat<S>(h.bottomRows(1)), trace);
    }
    pos_ += static_cast<int64_t>(ids.size());
    std::vector<double> row(static_cast<size_t>(out.cols()));
    for (Eigen::Index v = 0; v < out.cols(); ++v) row[v] = static_cast<double>(out(out.rows() - 1, v));
    return row;
  }
  void reset() override {
    m_.reset();
    pos_ = 0;
  }
  void set_range(const LayerRange& r) override { range_ = r; }
  Tensors replay(int layer, const std::string& op, const Tensors& in, int64_t pos0) override {
    return replay_.run(layer, op, in, pos0);
  }

 private:
  static ref::ModelOptions options(const BackendOptions& o) {
    if (!o.fault.empty() && o.fault != "none" && o.fault != "dense-attention")
      throw NotSupported("the reference has one fault, dense-attention (not '" + o.fault + "')");
    ref::set_threads(o.threads);
    ref::ModelOptions mo;
    // A pass asks for each expert of a layer once; with the layer's weights dropped after it has run
    // there is no later pass to serve, so the cache keeps only the expert in use.
    mo.expert_cache_bytes = o.release_layer_weights ? 0 : static_cast<size_t>(o.expert_cache_gib * double(1ull << 30));
    mo.dense_attention = o.fault == "dense-attention";
    mo.release_layer_weights = o.release_layer_weights;
    mo.experts_in_flight = o.experts_in_flight;
    return mo;
  }
  ref::Model<S> m_;
  ModelConfig c_;
  bool dense_;
  LayerRange range_;
  int64_t pos_ = 0;
  ReferenceReplay<S> replay_;
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend(const GgufFile& f, const ModelConfig& c, const BackendOptions& o) {
  if (o.precision == "f64") return std::make_unique<ReferenceBackend<double>>(f, c, o);
  if (o.precision == "f32") return std::make_unique<ReferenceBackend<float>>(f, c, o);
  throw InputError("--precision must be f32 or f64 for the reference, not '" + o.precision + "'");
}

}  // namespace mlaconf::be
