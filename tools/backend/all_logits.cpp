// mlaconf tools/backend: the logits of every position of one forward pass (all_logits.h).
#include "tools/backend/all_logits.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/trace.h"

namespace mlaconf::be {
namespace {

// Keeps the model-level logits and, when asked, each row's smallest decision gap; nothing else (no per-layer
// tensors copied to the host).
class LogitsTrace : public Trace {
 public:
  explicit LogitsTrace(bool gaps) : gaps_(gaps) {}
  bool wants(int layer, std::string_view name) const override {
    if (layer < 0) return name == op::kLogits;
    return gaps_ && (name == op::kIndexerTopkGap || name == op::kRouterTopkGap || name == op::kRouterGroupGap);
  }
  void record(int layer, std::string_view name, const double* data, const std::vector<int64_t>& shape) override {
    if (!wants(layer, name)) return;
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    if (layer < 0) {
      shape_ = shape;
      v_.assign(data, data + n);
      return;
    }
    if (shape.size() != 1) return;
    if (nearest_.size() < static_cast<size_t>(n)) nearest_.resize(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t)
      if (std::isfinite(data[t]) && data[t] < nearest_[static_cast<size_t>(t)].gap) nearest_[static_cast<size_t>(t)] = {data[t], layer, std::string(name)};
  }
  void record_i32(int, std::string_view, const int32_t*, const std::vector<int64_t>&) override {}
  bool gaps_;
  std::vector<int64_t> shape_;
  std::vector<double> v_;
  std::vector<RowDecisionGap> nearest_;
};

LogitsTrace run_pass(Backend& b, std::span<const int32_t> ids, int64_t n_vocab, bool gaps) {
  b.reset();
  LayerRange whole;
  whole.head_all_rows = true;
  b.set_range(whole);
  LogitsTrace tr(gaps);
  b.forward(ids, &tr);
  const std::vector<int64_t> want = {static_cast<int64_t>(ids.size()), n_vocab};
  if (tr.shape_ != want)
    throw std::runtime_error(b.describe() + ": the pass reported no logits of shape [" + std::to_string(want[0]) + ", " +
                             std::to_string(want[1]) + "]");
  return tr;
}

}  // namespace

std::vector<double> forward_all_logits(Backend& b, std::span<const int32_t> ids, int64_t n_vocab) {
  return std::move(run_pass(b, ids, n_vocab, false).v_);
}

LogitsAndGaps forward_all_logits_and_gaps(Backend& b, std::span<const int32_t> ids, int64_t n_vocab) {
  LogitsTrace tr = run_pass(b, ids, n_vocab, true);
  tr.nearest_.resize(ids.size());
  return {std::move(tr.v_), std::move(tr.nearest_)};
}

}  // namespace mlaconf::be
