// mlaconf tools/backend: the logits of every position of one forward pass (all_logits.h).
#include "tools/backend/all_logits.h"

#include <stdexcept>
#include <string>
#include <string_view>

#include "core/trace.h"

namespace mlaconf::be {
namespace {

// Keeps the model-level logits and asks for nothing else (no per-layer copies to the host).
class LogitsTrace : public Trace {
 public:
  bool wants(int layer, std::string_view name) const override { return layer < 0 && name == op::kLogits; }
  void record(int layer, std::string_view name, const double* data, const std::vector<int64_t>& shape) override {
    if (!wants(layer, name)) return;
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    shape_ = shape;
    v_.assign(data, data + n);
  }
  void record_i32(int, std::string_view, const int32_t*, const std::vector<int64_t>&) override {}
  std::vector<int64_t> shape_;
  std::vector<double> v_;
};

}  // namespace

std::vector<double> forward_all_logits(Backend& b, std::span<const int32_t> ids, int64_t n_vocab) {
  b.reset();
  LayerRange whole;
  whole.head_all_rows = true;
  b.set_range(whole);
  LogitsTrace tr;
  b.forward(ids, &tr);
  const std::vector<int64_t> want = {static_cast<int64_t>(ids.size()), n_vocab};
  if (tr.shape_ != want)
    throw std::runtime_error(b.describe() + ": the pass reported no logits of shape [" + std::to_string(want[0]) + ", " +
                             std::to_string(want[1]) + "]");
  return std::move(tr.v_);
}

}  // namespace mlaconf::be
