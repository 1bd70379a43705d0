// `mlaconf kld --against RUN.json`: another engine's generated tokens and top-N logprobs, judged against the
// reference in float64 run teacher-forced on the same ids (docs/KLD.md "Against another engine's logprobs").
#pragma once
#include <string>

#include "tools/kld_check.h"

namespace mlaconf::cli {

struct KldAgainstArgs {
  std::string model, against;
  std::string engine_precision = "bf16";  // the precision class whose margin and tie gap excuse a differing top-1
  KldCheck check;  // the optional bounds (--max-mean-kld, --min-same-top), over all positions
  bool json = false;
  bool generate_report = false;  // `generate --against`: generate's report (the token streams and their divergences)
};

// `generate --against RUN.json` shares the run and the classes; it prints generate's report instead: the
// engine's text on stdout, the first divergence and the counts on stderr, or with --json {"prompt_ids",
// "reference": {"tokens", "margins"} (the reference's argmax on the engine's prefix and its top-1 minus
// top-2 logit), "engine": {"tokens", "margins" (top-1 minus top-2 logprob; null with top-1 only), "text"},
// "first_divergence": null | {"step", "reference_token", "engine_token", "reference_margin", "engine_margin",
// "truth_gap", "beyond_topk", "class"}, "divergences": [...], "engine_precision", "margin", "tie_gap", "verdict"}.
// Validates, runs, prints, sets the exit code: 0 pass, 1 fail (a divergence classed failure, or a bound
// violated), 2 unusable input (InputError).
void run_kld_against(const KldAgainstArgs& a);

}  // namespace mlaconf::cli
