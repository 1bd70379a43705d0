// core/env_switch.h: the one reader of the 0|1 environment switches (the CUDA pipeline's MLACONF_CUDA_*, the
// tensor-core GEMV's MLACONF_MMA_*, MLACONF_GROUP_EXPERTS): unset or empty is the default, 0 / 1 off / on, any
// other value an InputError that names the variable and the value.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/env_switch.h"

namespace mlaconf {
namespace {

constexpr const char* kName = "MLACONF_TEST_ENV_SWITCH";

TEST(env_switch, values) {
  ::unsetenv(kName);
  EXPECT_FALSE(env_switch(kName).has_value());
  ::setenv(kName, "", 1);
  EXPECT_FALSE(env_switch(kName).has_value());
  ::setenv(kName, "0", 1);
  EXPECT_EQ(env_switch(kName), std::optional<bool>(false));
  ::setenv(kName, "1", 1);
  EXPECT_EQ(env_switch(kName), std::optional<bool>(true));
  for (const char* bad : {"2", "yes", "on", "01", " 1", "true"}) {
    ::setenv(kName, bad, 1);
    try {
      (void)env_switch(kName);
      ADD_FAILURE() << "'" << bad << "' was taken";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), std::string(kName) + " must be 0 or 1, not '" + bad + "'");
    }
  }
  ::unsetenv(kName);
}

}  // namespace
}  // namespace mlaconf
