// mlaconf CLI: the settings reader (see settings.h). The only getenv of optimized/, tools/ and fixtures/.
#include "tools/settings.h"

#include <CLI/CLI.hpp>
#include <cstdlib>

#include "core/error.h"

namespace mlaconf::cli {

Settings read_settings(const EnvLookup& env) {
  auto value = [&](const char* name) -> std::string {
    const char* v = env(name);
    return v ? v : "";
  };
  for (const char* name : kRetiredVariables)
    if (!value(name).empty())
      throw InputError(std::string(name) + " no longer chooses anything: its kernel variant lost its measurements and was removed "
                                           "(docs/SETTINGS.md); unset it");
  Settings s;
  for (const cuda::KernelKnob& k : cuda::kKernelKnobs)
    if (const std::string v = value(k.env); !v.empty()) cuda::set_kernel_option(s.kernels, k.key, v, k.env);
  s.llama_python = value("MLACONF_PYTHON");
  if (const std::string v = value("MLACONF_LLAMA_LOG"); !v.empty()) {
    if (v != "0" && v != "1") throw InputError("MLACONF_LLAMA_LOG must be one of 0, 1, not '" + v + "'");
    s.llama_log = v == "1";
  }
  return s;
}

namespace {
Settings& loaded() {
  static Settings s;
  return s;
}
}  // namespace

void load_settings() { loaded() = read_settings([](const char* name) { return std::getenv(name); }); }
const Settings& settings() { return loaded(); }

void add_kernel_config_option(CLI::App* sub, std::string* text) {
  sub->add_option("--kernel-config", *text,
                  "cuda: kernel choices as key=value,... over the MLACONF_* environment (docs/SETTINGS.md), e.g. "
                  "gemv=simt,decode_graph=1");
}

std::string settings_table_markdown() {
  std::string t = "| variable | --kernel-config key | values | default | chooses |\n|---|---|---|---|---|\n";
  const auto defaults = cuda::kernel_config_fields(cuda::KernelConfig{});
  for (const cuda::KernelKnob& k : cuda::kKernelKnobs) {
    std::string d;
    for (const auto& [key, v] : defaults)
      if (key == k.key) d = v;
    t += std::string("| `") + k.env + "` | `" + k.key + "` | " + k.values + " | " + d + " | " + k.meaning + " |\n";
  }
  t += "| `MLACONF_PYTHON` | | a path | /usr/bin/python3, else the PATH's | the python3 asked for the llama_cpp package (`answer --backend llama.cpp`) |\n";
  t += "| `MLACONF_LLAMA_LOG` | | 0, 1 | 0 | llama.cpp's own log lines on stderr |\n";
  return t;
}

cuda::KernelConfig kernel_config(const std::string& text) {
  cuda::KernelConfig c = settings().kernels;
  cuda::apply_kernel_config(c, text);
  return c;
}

}  // namespace mlaconf::cli
