// The optional pass/fail check of `mlaconf kld`, the same in both modes (a backend on a corpus, and
// --against another engine's run): a bound on the Mean KLD (nats) and one on the top-1 agreement (percent),
// both over all positions; with --against also one on every row's KLD (the rows a mean hides: a bug in the 32
// rows past top_k of a 2080-token prompt), judged there with each row's decisions (tools/kld_against.cpp).
// docs/KLD.md describes the check and its JSON.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace mlaconf::cli {

struct KldCheck {
  std::optional<double> max_mean_kld;  // --max-mean-kld X: fail when the Mean KLD exceeds X nats
  std::optional<double> max_row_kld;   // --max-row-kld X (--against): fail a row whose KLD exceeds X nats
  std::optional<double> min_same_top;  // --min-same-top P: fail when the top-1 agreement is below P percent

  bool given() const { return max_mean_kld || max_row_kld || min_same_top; }

  // Throws InputError naming the option: X finite and >= 0, P in [0, 100].
  void validate() const;

  // One line per bound violated of the mean and the top-1 (a NaN or infinite figure violates). `same_top` is a
  // fraction in [0, 1]; `same_top_label` is how the report calls it ("Same top p", "top-1 agreement").
  std::vector<std::string> violations(double mean_kld, double same_top, const std::string& same_top_label) const;

  // The JSON "check" object: {"max_mean_kld", "max_row_kld", "min_same_top_percent" (null when not given),
  // "violations", "verdict"}.
  Json json(const std::vector<std::string>& violations, const std::string& verdict) const;
};

}  // namespace mlaconf::cli
