// suites/reference: the reference model run on one case of an oracle file (the shared transformers
// oracle, or an HF oracle of fixtures/data/hf) and judged by the judge of fixtures/ (fx::compare_case):
// the same tolerance classes, bounds at the reference's precision (f64 or f32) and decision-aware rules
// as `mlaconf compare`. Used by suites/reference/test_oracle.cpp and suites/hf/test_hf_oracle.cpp.
//
// Besides the judge's verdict, the differences the judge reports as info are held to the bound of the
// dataset they are differences of: a top-k gap (k-th minus (k+1)-th score) to the scores' (or router
// weights') max_rel, a greedy margin (top-1 minus top-2 logit) to the logits' max_rel, each relative to
// that dataset's largest expected magnitude: |a - e| <= max_rel * max |expected|. The gaps decide which
// rows a capture flags as near-ties, so a wrong gap would misdirect the judge.
#pragma once
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/model_config.h"
#include "fixtures/compare.h"

namespace mlaconf::test {

// Runs ref::Model<S> on case `cas` of `oracle` (a greedy case when it holds `tokens`, else a full
// forward) and judges every dataset the case holds. Prints the worst metrics per op (the figures the
// docs quote) and adds a gtest failure for each failing dataset or out-of-bound difference.
template <class S>
fx::CompareReport judge_reference_case(const GgufFile& f, const ModelConfig& c, const std::string& oracle,
                                       const std::string& cas);

// Negative control: the reference with dense attention (the indexer's selection ignored) on `cas`.
// Below top_k tokens sparse == dense, so the judge must pass the logits (expect_pass); past it, it must
// fail them. Prints the metrics and on how many positions the greedy token changes.
void judge_dense_attention(const GgufFile& f, const ModelConfig& c, const std::string& oracle, const std::string& cas,
                           bool expect_pass);

}  // namespace mlaconf::test
