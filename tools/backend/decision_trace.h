// mlaconf tools/backend: a Trace that keeps only a pass's discrete decisions (indexer top-k rows and
// router ids, per layer) and their gaps: what `generate --backend both` forces on the backend under
// test, and what it compares that backend's own decisions against.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/decisions.h"
#include "core/trace.h"

namespace mlaconf::be {

class DecisionTrace : public Trace {
 public:
  explicit DecisionTrace(Trace* inner = nullptr) : inner_(inner) {}
  bool wants(int layer, std::string_view name) const override;
  void record(int layer, std::string_view name, const double* data, const std::vector<int64_t>& shape) override;
  void record_i32(int layer, std::string_view name, const int32_t* data, const std::vector<int64_t>& shape) override;

  const ForcedDecisions& decisions() const { return d_; }
  // Per layer, per row: the k-th minus (k+1)-th score (indexer) or selection score (router).
  const std::map<int, std::vector<double>>& topk_gap() const { return topk_gap_; }
  const std::map<int, std::vector<double>>& router_gap() const { return router_gap_; }

 private:
  Trace* inner_;
  ForcedDecisions d_;
  std::map<int, std::vector<double>> topk_gap_, router_gap_;
};

// The first decision of `got` that differs from `want` (same layers, same pass): layer, row, kind
// ("indexer_topk" / "router_ids") and the gap `want` had there. found = false when all are equal.
struct DecisionDiff {
  bool found = false;
  int layer = -1;
  int64_t row = -1;
  std::string kind;
  double gap = 0;
  int64_t differing_rows = 0;     // over every layer
  int64_t rows_outside_ties = 0;  // differing rows where want's gap is larger than tie_gap (or unknown)
};
DecisionDiff first_decision_difference(const DecisionTrace& want, const DecisionTrace& got, double tie_gap);

}  // namespace mlaconf::be
