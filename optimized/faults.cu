// mlaconf optimized: the active fault (one process-wide switch).
#include "optimized/faults.h"

#include <atomic>

#include "core/error.h"
#include "core/fault_names.h"

namespace mlaconf::cuda {
namespace {
std::atomic<Fault> g_fault{Fault::None};
// core/fault_names.h lists the names in the enum's order (after None).
constexpr Fault kFaults[] = {Fault::DenseAttention, Fault::TopkUpperTie, Fault::NoLseMerge, Fault::InjectOverflow,
                             Fault::SplitNoHandoff, Fault::GemvDropTail, Fault::GemvXBf16, Fault::IndexerNoBound};
static_assert(sizeof(kFaults) / sizeof(kFaults[0]) == kFaultNames.size(), "core/fault_names.h and the Fault enum differ");
}  // namespace

std::vector<std::string> fault_names() { return std::vector<std::string>(kFaultNames.begin(), kFaultNames.end()); }
void set_fault(Fault f) { g_fault.store(f); }
void set_fault(const std::string& name) {
  if (name.empty() || name == "none") return set_fault(Fault::None);
  std::string known;
  for (size_t i = 0; i < kFaultNames.size(); ++i) {
    if (name == kFaultNames[i]) return set_fault(kFaults[i]);
    known += (i ? ", " : "") + std::string(kFaultNames[i]);
  }
  throw InputError("unknown fault '" + name + "' (known: " + known + ")");
}
Fault active_fault() { return g_fault.load(); }

}  // namespace mlaconf::cuda
