// mlaconf optimized: the active fault (one process-wide switch).
#include "optimized/faults.h"

#include <atomic>

#include "core/error.h"

namespace mlaconf::cuda {
namespace {
std::atomic<Fault> g_fault{Fault::None};
struct Named { const char* name; Fault f; };
constexpr Named kNames[] = {
    {"dense-attention", Fault::DenseAttention},
    {"topk-upper-tie", Fault::TopkUpperTie},
    {"no-lse-merge", Fault::NoLseMerge},
    {"inject-overflow", Fault::InjectOverflow},
    {"split-no-handoff", Fault::SplitNoHandoff},
};
}  // namespace

std::vector<std::string> fault_names() {
  std::vector<std::string> v;
  for (const auto& n : kNames) v.push_back(n.name);
  return v;
}
void set_fault(Fault f) { g_fault.store(f); }
void set_fault(const std::string& name) {
  if (name.empty() || name == "none") return set_fault(Fault::None);
  for (const auto& n : kNames)
    if (name == n.name) return set_fault(n.f);
  throw InputError("unknown fault '" + name + "' (known: dense-attention, topk-upper-tie, no-lse-merge, inject-overflow, split-no-handoff)");
}
Fault active_fault() { return g_fault.load(); }

}  // namespace mlaconf::cuda
