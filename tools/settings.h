// mlaconf CLI: the one reader of the environment. The MLACONF_* variables of docs/SETTINGS.md are overrides of
// the built-in defaults, read once when `mlaconf` starts (main(), before the command line): the CUDA pipeline's
// kernel choices (optimized/kernel_config.h) and the llama.cpp library's options. A command's --kernel-config
// applies over them. A bad value is an InputError of one line naming the variable (exit 2), so that a typo
// never passes for a setting. Nothing below tools/ reads the environment (suites/core `settings` greps for it).
#pragma once
#include <functional>
#include <string>

#include "optimized/kernel_config.h"

namespace CLI {
class App;
}

namespace mlaconf::cli {

struct Settings {
  cuda::KernelConfig kernels;
  std::string llama_python;  // MLACONF_PYTHON: the python3 asked for the llama_cpp package ("" = the default)
  bool llama_log = false;    // MLACONF_LLAMA_LOG=1: llama.cpp's own log lines to stderr
};

// The environment as a lookup (null when unset), so that tests can give their own.
using EnvLookup = std::function<const char*(const char*)>;
// The settings the variables choose; unset or empty leaves a default. InputError for a bad value, and for a
// variable that no longer chooses anything (kRetiredVariables), so that a run is not believed to measure it.
Settings read_settings(const EnvLookup& env);

// The variables that chose kernel variants which lost their measurements and were removed (docs/SETTINGS.md).
inline constexpr const char* kRetiredVariables[] = {
    "MLACONF_MMA_BALANCE", "MLACONF_MMA_CHAIN",  "MLACONF_MMA_WIDE", "MLACONF_MMA_GROUPED_SMALL",
    "MLACONF_MMA_XSMEM",   "MLACONF_MMA_XSMEM_GROUPED", "MLACONF_MMA_XWARP"};

// main(): reads the process environment once (InputError as above); settings() then returns the result.
void load_settings();
const Settings& settings();

// `--kernel-config key=value,...` on a command that runs the CUDA pipeline: `text` receives the option's
// value; kernel_config(text) is the start-up settings' config with it applied (InputError for a bad key or value).
void add_kernel_config_option(CLI::App* sub, std::string* text);
cuda::KernelConfig kernel_config(const std::string& text);

// docs/SETTINGS.md's table: every variable, its --kernel-config key, values and default (suites/settings checks it).
std::string settings_table_markdown();

}  // namespace mlaconf::cli
