// suites/quant: test helpers. Cases are registered under canonical names with
// mlaconf::test::register_case (suites/common/case_registry.h).
#pragma once
#include <string>

#include "suites/common/case_registry.h"

namespace mlaconf::test {

inline std::string shared_path(const std::string& rel) { return std::string(MLACONF_SHARED_DIR) + "/" + rel; }

}  // namespace mlaconf::test
