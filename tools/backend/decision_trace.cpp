// mlaconf tools/backend: DecisionTrace (see decision_trace.h).
#include "tools/backend/decision_trace.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace mlaconf::be {
namespace {
bool is_decision(std::string_view n) {
  return n == op::kIndexerTopk || n == op::kIndexerTopkGap || n == op::kRouterIds || n == op::kRouterTopkGap;
}
int64_t count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}
}  // namespace

bool DecisionTrace::wants(int layer, std::string_view name) const {
  return is_decision(name) || (inner_ && inner_->wants(layer, name));
}
void DecisionTrace::record(int layer, std::string_view name, const double* data, const std::vector<int64_t>& shape) {
  if (name == op::kIndexerTopkGap) topk_gap_[layer].assign(data, data + count(shape));
  if (name == op::kRouterTopkGap) router_gap_[layer].assign(data, data + count(shape));
  if (inner_ && inner_->wants(layer, name)) inner_->record(layer, name, data, shape);
}
void DecisionTrace::record_i32(int layer, std::string_view name, const int32_t* data, const std::vector<int64_t>& shape) {
  if (name == op::kIndexerTopk) d_.topk[layer].assign(data, data + count(shape));
  if (name == op::kRouterIds) d_.experts[layer].assign(data, data + count(shape));
  if (inner_ && inner_->wants(layer, name)) inner_->record_i32(layer, name, data, shape);
}

DecisionDiff first_decision_difference(const DecisionTrace& want, const DecisionTrace& got, double tie_gap) {
  DecisionDiff r;
  auto scan = [&](const std::map<int, std::vector<int32_t>>& w, const std::map<int, std::vector<int32_t>>& g,
                  const std::map<int, std::vector<double>>& gaps, const char* kind) {
    for (const auto& [l, wv] : w) {
      auto it = g.find(l);
      if (it == g.end() || it->second.size() != wv.size()) continue;
      auto gi = gaps.find(l);
      const int64_t rows = gi != gaps.end() && !gi->second.empty() ? static_cast<int64_t>(gi->second.size()) : 1;
      const int64_t width = static_cast<int64_t>(wv.size()) / std::max<int64_t>(rows, 1);
      for (int64_t t = 0; t < rows; ++t) {
        // Rows are ascending lists: compare them as sets (-1 padding included, it sorts first).
        std::multiset<int32_t> a(wv.begin() + t * width, wv.begin() + (t + 1) * width),
            b(it->second.begin() + t * width, it->second.begin() + (t + 1) * width);
        if (a == b) continue;
        ++r.differing_rows;
        const double gap = gi != gaps.end() && t < static_cast<int64_t>(gi->second.size()) ? gi->second[t] : NAN;
        if (!(std::fabs(gap) <= tie_gap)) ++r.rows_outside_ties;
        if (!r.found || l < r.layer) {
          r.found = true;
          r.layer = l;
          r.row = t;
          r.kind = kind;
          r.gap = gap;
        }
      }
    }
  };
  scan(want.decisions().topk, got.decisions().topk, want.topk_gap(), "indexer_topk");
  scan(want.decisions().experts, got.decisions().experts, want.router_gap(), "router_ids");
  return r;
}

}  // namespace mlaconf::be
