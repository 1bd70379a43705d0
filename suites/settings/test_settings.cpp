// tools/settings.h and optimized/kernel_config.h: the MLACONF_* variables are read in one place, into one
// KernelConfig whose defaults are the production choices; a bad value or a retired variable is refused in one
// line (exit 2 through the CLI); docs/SETTINGS.md's table is the code's.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "core/error.h"
#include "optimized/kernel_config.h"
#include "tools/settings.h"

namespace mlaconf::cli {
namespace {

Settings from(const std::map<std::string, std::string>& env) {
  return read_settings([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string refusal(const std::map<std::string, std::string>& env) {
  try {
    (void)from(env);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(settings, defaults_are_the_production_choices) {
  const Settings s = from({});
  EXPECT_EQ(cuda::to_string(s.kernels),
            "gemv=default,prefill=fp16x3,gemv_max_tokens=8,decode_graph=0,batch_invariant=1,indexer_q_main=1,"
            "indexer_key_fused=1,group_experts=auto");
  EXPECT_EQ(s.llama_python, "");
  EXPECT_FALSE(s.llama_log);
}

TEST(settings, every_variable_overrides_its_key) {
  const Settings s = from({{"MLACONF_GEMV_VARIANT", "simt"},
                           {"MLACONF_CUDA_PREFILL", "fp32"},
                           {"MLACONF_CUDA_GEMV_MAX_TOKENS", "16"},
                           {"MLACONF_CUDA_GRAPH", "1"},
                           {"MLACONF_CUDA_BATCH_INVARIANT", "0"},
                           {"MLACONF_CUDA_INDEXER_Q_MAIN", "0"},
                           {"MLACONF_CUDA_FUSED_KEY", "0"},
                           {"MLACONF_GROUP_EXPERTS", "0"},
                           {"MLACONF_PYTHON", "/opt/py"},
                           {"MLACONF_LLAMA_LOG", "1"}});
  EXPECT_EQ(cuda::to_string(s.kernels),
            "gemv=simt,prefill=fp32,gemv_max_tokens=16,decode_graph=1,batch_invariant=0,indexer_q_main=0,"
            "indexer_key_fused=0,group_experts=0");
  EXPECT_EQ(s.llama_python, "/opt/py");
  EXPECT_TRUE(s.llama_log);
  // Empty is unset: the default stays.
  EXPECT_TRUE(from({{"MLACONF_CUDA_BATCH_INVARIANT", ""}}).kernels.batch_invariant);
}

TEST(settings, bad_values_are_refused_in_one_line) {
  for (const auto& [name, v] : std::map<std::string, std::string>{{"MLACONF_CUDA_GRAPH", "yes"},
                                                                  {"MLACONF_CUDA_GEMV_MAX_TOKENS", "8x"},
                                                                  {"MLACONF_CUDA_GEMV_MAX_TOKENS", "-1"},
                                                                  {"MLACONF_GEMV_VARIANT", "3"},
                                                                  {"MLACONF_CUDA_PREFILL", "bf16"},
                                                                  {"MLACONF_LLAMA_LOG", "on"}}) {
    const std::string e = refusal({{name, v}});
    EXPECT_NE(e.find(name), std::string::npos) << e;
    EXPECT_NE(e.find("'" + v + "'"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  for (const char* retired : kRetiredVariables) EXPECT_NE(refusal({{retired, "0"}}).find("no longer chooses"), std::string::npos) << retired;
}

TEST(settings, kernel_config_text_round_trips) {
  cuda::KernelConfig c;
  cuda::apply_kernel_config(c, "gemv=mma,group_experts=1,gemv_max_tokens=0");
  EXPECT_EQ(c.gemv, cuda::GemvKernel::Mma);
  EXPECT_EQ(c.group_experts, std::optional<bool>(true));
  EXPECT_EQ(c.gemv_max_tokens, 0);
  cuda::KernelConfig back;
  cuda::apply_kernel_config(back, cuda::to_string(c));
  EXPECT_EQ(cuda::to_string(back), cuda::to_string(c));
  // Every key of the table is one the parser and the printer know, in the same order.
  const auto fields = cuda::kernel_config_fields(c);
  ASSERT_EQ(fields.size(), std::size(cuda::kKernelKnobs));
  for (size_t i = 0; i < fields.size(); ++i) EXPECT_EQ(fields[i].first, cuda::kKernelKnobs[i].key);
  EXPECT_THROW(cuda::apply_kernel_config(c, "gemv"), InputError);
  EXPECT_THROW(cuda::apply_kernel_config(c, "xsmem=1"), InputError);
}

// The CLI reads the environment before its command line: a bad value is one error line and exit 2, whatever the
// command (here --version, which otherwise exits 0).
TEST(settings, cli_refuses_a_bad_value_in_one_line) {
  auto run = [](const std::string& env, std::string* err) {
    const std::string cmd = "env " + env + " '" + std::string(MLACONF_CLI) + "' --version 2>&1 >/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    char buf[512];
    err->clear();
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) err->append(buf, n);
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  std::string err;
  EXPECT_EQ(run("MLACONF_CUDA_GRAPH=1", &err), 0) << err;
  EXPECT_EQ(run("MLACONF_CUDA_GRAPH=yes", &err), 2) << err;
  EXPECT_EQ(err.rfind("mlaconf: error: MLACONF_CUDA_GRAPH", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(settings, docs_table_is_the_codes) {
  std::ifstream in(std::string(MLACONF_SOURCE_DIR) + "/docs/SETTINGS.md");
  ASSERT_TRUE(in) << "docs/SETTINGS.md missing";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find(settings_table_markdown()), std::string::npos)
      << "docs/SETTINGS.md must contain exactly this table:\n" << settings_table_markdown();
  for (const char* retired : kRetiredVariables) EXPECT_NE(ss.str().find(retired), std::string::npos) << retired;
}

// `git grep getenv optimized/ tools/ fixtures/` finds tools/settings.cpp only: settings are passed in options,
// not read from the environment deep inside.
TEST(settings, one_reader_of_the_environment) {
  namespace fs = std::filesystem;
  std::vector<std::string> readers;
  for (const char* dir : {"optimized", "tools", "fixtures"}) {
    for (const auto& e : fs::recursive_directory_iterator(fs::path(MLACONF_SOURCE_DIR) / dir)) {
      if (!e.is_regular_file()) continue;
      const std::string ext = e.path().extension().string();
      if (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh" && ext != ".inc" && ext != ".py") continue;
      std::ifstream f(e.path());
      std::stringstream ss;
      ss << f.rdbuf();
      if (ss.str().find("getenv") != std::string::npos) readers.push_back(fs::relative(e.path(), MLACONF_SOURCE_DIR).string());
    }
  }
  EXPECT_EQ(readers, std::vector<std::string>{"tools/settings.cpp"});
}

}  // namespace
}  // namespace mlaconf::cli
