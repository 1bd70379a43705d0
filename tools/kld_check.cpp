// The check of `mlaconf kld` (kld_check.h).
#include "tools/kld_check.h"

#include <cstdio>

#include "core/error.h"
#include "tools/validate.h"

namespace mlaconf::cli {
namespace {
std::string g(double x) {  // %g: a correct backend's KLD is far below what fixed decimals show
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}
}  // namespace

void KldCheck::validate() const {
  if (max_mean_kld) require_finite_nonnegative(*max_mean_kld, "--max-mean-kld");
  if (max_row_kld) require_finite_nonnegative(*max_row_kld, "--max-row-kld");
  if (min_same_top && !(*min_same_top >= 0 && *min_same_top <= 100))
    throw InputError("kld: --min-same-top is a percentage in [0, 100]");
}

std::vector<std::string> KldCheck::violations(double mean_kld, double same_top, const std::string& same_top_label) const {
  std::vector<std::string> v;
  if (max_mean_kld && !(mean_kld <= *max_mean_kld))  // NaN / inf violate too
    v.push_back("Mean KLD " + g(mean_kld) + " > --max-mean-kld " + g(*max_mean_kld));
  if (min_same_top && !(100 * same_top >= *min_same_top))
    v.push_back(same_top_label + " " + g(100 * same_top) + "% < --min-same-top " + g(*min_same_top) + "%");
  return v;
}

Json KldCheck::json(const std::vector<std::string>& violations, const std::string& verdict) const {
  return {{"max_mean_kld", max_mean_kld ? Json(*max_mean_kld) : Json(nullptr)},
          {"max_row_kld", max_row_kld ? Json(*max_row_kld) : Json(nullptr)},
          {"min_same_top_percent", min_same_top ? Json(*min_same_top) : Json(nullptr)},
          {"violations", violations},
          {"verdict", verdict}};
}

}  // namespace mlaconf::cli
