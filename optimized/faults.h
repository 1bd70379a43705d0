// mlaconf optimized: named fault injections, for negative controls.
//
// A suite switches one on (ScopedFault) to prove that its conformance check catches the bug the fault
// reproduces. Nothing in production turns them on; `mlaconf ... --fault NAME` may.
#pragma once
#include <string>
#include <vector>

namespace mlaconf::cuda {

enum class Fault {
  None,
  DenseAttention,   // "dense-attention": sparse MLA attends to every causal row, ignoring the index list
  TopkUpperTie,     // "topk-upper-tie": top-k ties go to the higher index
  NoLseMerge,       // "no-lse-merge": split-K partials summed without rescaling to a common max
  InjectOverflow,   // "inject-overflow": the pipeline writes +inf into layer 1's q_a output
  SplitNoHandoff,   // "split-no-handoff": a layer split's next stage starts without the hidden state
                    // (its fresh, poisoned buffer: NaN), as if the copy between devices were lost
  GemvDropTail,     // "gemv-drop-tail": the GEMV grid covers n_rows rounded down to a multiple of 8, so the
                    // last n_rows % 8 rows are never written (every GEMV: single, experts, per head, W_UV)
  GemvXBf16,        // "gemv-x-bf16": the tensor-core GEMV keeps only x's first fp16 term (of x scaled per block),
                    // as a kernel that fed x to the tensor cores in one 16-bit format would (the name is from
                    // when both types used bf16)
  IndexerNoBound,   // "indexer-no-bound": the decode selection's filter (indexer_select_f32_rows) takes its fp16
                    // tensor-core scores for exact (an error bound of 0), as a kernel that ranked on them would
};

// Names, for the CLI and the report: "dense-attention" ("dense attention in place of sparse"), ...
std::vector<std::string> fault_names();
// Throws InputError for an unknown name. "" or "none" clears.
void set_fault(const std::string& name);
void set_fault(Fault f);
Fault active_fault();

struct ScopedFault {
  explicit ScopedFault(Fault f) : prev(active_fault()) { set_fault(f); }
  ~ScopedFault() { set_fault(prev); }
  Fault prev;
};

}  // namespace mlaconf::cuda
