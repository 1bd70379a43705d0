// mlaconf tools/backend: the op-level default (see op_level_budget.h).
#include "tools/backend/op_level_budget.h"

#include <cstdio>

#include "core/op_registry.h"
#include "fixtures/collector.h"
#include "fixtures/schema.h"

namespace mlaconf::be {

int64_t op_level_values(const ModelConfig& c, int l, int64_t T) {
  const fx::ModelDims dims = fx::ModelDims::from_config(c);
  int64_t total = 0;
  for (const OpRow& r : op_registry()) {
    if (r.level != DatasetLevel::Layer || fx::is_model_level_layer_name(r.name) || !c.layer_is(r.kind, l)) continue;
    int64_t n = 1;
    for (const std::string& sym : shape_symbols(r.shape)) {
      auto it = dims.d.find(sym);
      n *= sym == "T" || sym == "S" ? T : it != dims.d.end() ? it->second : 1;
    }
    total += n;
  }
  return total;
}

OpLevelDefault default_op_layers(const ModelConfig& c, const std::vector<int>& captured, int64_t T) {
  int64_t values = 0;
  for (int l : captured) values += op_level_values(c, l, T);
  OpLevelDefault d;
  if (values * 8 <= kOpLevelBudgetBytes) {
    d.layers = captured;
    return d;
  }
  std::string which = captured.size() == 1 ? "layer " + std::to_string(captured.front()) : std::to_string(captured.size()) + " layers";
  char line[320];
  std::snprintf(line, sizeof line,
                "capture: no op-level datasets: those of %s at %lld tokens would be %.1f GB as double (%lld M values), over the "
                "default's %.0f GB; ask for them with --op-layers %d (a list of layers, or all)",
                which.c_str(), static_cast<long long>(T), values * 8 / 1e9, static_cast<long long>(values / 1000000),
                kOpLevelBudgetBytes / 1e9, captured.front());
  d.note = line;
  return d;
}

}  // namespace mlaconf::be
