// `mlaconf kld --against RUN.json`: another engine's generated tokens and top-N logprobs, judged against the
// reference in float64 run teacher-forced on the same ids (docs/KLD.md "Against another engine's logprobs").
#pragma once
#include <optional>
#include <string>

namespace mlaconf::cli {

struct KldAgainstArgs {
  std::string model, against;
  std::string engine_precision = "bf16";  // the precision class whose margin and tie gap excuse a differing top-1
  std::optional<double> max_mean_kld, min_same_top;  // optional bounds (nats; percent), over all positions
  bool json = false;
};

// Validates, runs, prints, sets the exit code: 0 pass, 1 fail (a divergence classed failure, or a bound
// violated), 2 unusable input (InputError).
void run_kld_against(const KldAgainstArgs& a);

}  // namespace mlaconf::cli
