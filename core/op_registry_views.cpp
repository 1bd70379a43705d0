// mlaconf: views derived from the op registry's rows (see op_registry.h).
#include <sstream>

#include "core/op_registry.h"

namespace mlaconf {
std::vector<std::string> row_list(const char* field) {
  std::vector<std::string> v;
  std::istringstream in(field ? field : "");
  for (std::string w; in >> w;) v.push_back(w);
  return v;
}

std::vector<std::string> shape_symbols(const char* shape) {
  std::vector<std::string> v;
  std::istringstream in(shape ? shape : "");
  for (std::string t; std::getline(in, t, ',');) v.push_back(t);
  return v;
}

int forward_rank_in(std::span<const OpRow> rows, std::string_view name) {
  int layer_rank = 0, case_rank = 1000;
  for (const OpRow& r : rows) {
    const bool layer = r.level == DatasetLevel::Layer;
    if (name == r.name) return layer ? layer_rank : case_rank;
    ++(layer ? layer_rank : case_rank);
  }
  return 2000;
}

std::vector<const char*> panel_ops(std::span<const OpRow> rows, Panel p) {
  std::vector<const char*> v;
  for (const OpRow& r : rows)
    if (r.level == DatasetLevel::Layer && r.panel == p && p != Panel::None) v.push_back(r.name);
  return v;
}

std::vector<ReplayOp> replay_ops_from(std::span<const OpRow> rows) {
  std::vector<ReplayOp> t;
  for (const OpRow& r : rows) {
    if (r.level != DatasetLevel::Layer || !*r.replay_inputs) continue;
    ReplayOp op{r.name, row_list(r.replay_inputs), {r.name}, LayerKind::Any};
    for (const OpRow& o : rows)
      if (o.level == DatasetLevel::Layer && std::string_view(o.computed_by) == r.name) op.outputs.push_back(o.name);
    if (!*r.replay_moe_inputs) {
      t.push_back(std::move(op));
      continue;
    }
    ReplayOp moe = op;
    moe.inputs = row_list(r.replay_moe_inputs);
    moe.kind = LayerKind::Moe;
    op.kind = LayerKind::Dense;
    t.push_back(std::move(op));
    t.push_back(std::move(moe));
  }
  return t;
}

const std::vector<ReplayOp>& replay_ops() {
  static const std::vector<ReplayOp> t = replay_ops_from(op_registry());
  return t;
}

}  // namespace mlaconf
