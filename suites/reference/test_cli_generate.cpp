// suites/reference: `mlaconf generate` end to end: the JSON contract ({"tokens", "margins"}, generated
// tokens only), the oracle's greedy tokens through incremental decode, and exit codes on bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <vector>

#include "suites/common/case_registry.h"
#include "suites/reference/oracle_h5.h"

namespace mlaconf::test {
namespace {

const std::string kModel = std::string(MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.gguf";
const std::string kOracle = std::string(MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.oracle.h5";

// Runs a command; returns its exit code and stdout.
int run(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) throw std::runtime_error("popen failed: " + cmd);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::vector<double> json_array(const std::string& s, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(s, m, std::regex("\"" + key + "\": \\[([^\\]]*)\\]"))) return {};
  std::vector<double> v;
  std::string body = m[1];
  std::regex num("[-+0-9.eE]+");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), num); it != std::sregex_iterator(); ++it)
    v.push_back(std::stod(it->str()));
  return v;
}

void generate_json(const char* precision) {
  if (!std::filesystem::exists(MLACONF_CLI)) GTEST_SKIP() << "skipped: " << MLACONF_CLI << " is not built";
  if (!std::filesystem::exists(kOracle)) GTEST_SKIP() << "skipped: shared data absent (" << kOracle << ")";
  H5File h(kOracle);
  std::vector<int32_t> ids = h.read_i32("/greedy200x24/input_ids"), want = h.read_i32("/greedy200x24/tokens");
  std::vector<double> margins = h.read_f64("/greedy200x24/margins");
  std::string list;
  for (size_t i = 0; i < ids.size(); ++i) list += (i ? "," : "") + std::to_string(ids[i]);
  std::string out;
  const int rc = run(std::string(MLACONF_CLI) + " generate --model " + kModel + " --prompt-ids " + list + " -n " +
                         std::to_string(want.size()) + " --precision " + precision + " --json",
                     &out);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "exactly one JSON object: " << out;
  std::vector<double> tok = json_array(out, "tokens"), mar = json_array(out, "margins");
  ASSERT_EQ(tok.size(), want.size()) << out;
  ASSERT_EQ(mar.size(), want.size()) << out;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(static_cast<int32_t>(tok[i]), want[i]) << "step " << i;
    EXPECT_NEAR(mar[i], margins[i], 1e-4) << "step " << i << " margin (logit units)";
  }
}

void exit_codes() {
  if (!std::filesystem::exists(MLACONF_CLI)) GTEST_SKIP() << "skipped: " << MLACONF_CLI << " is not built";
  std::string out;
  const std::string g = std::string(MLACONF_CLI) + " generate --model " + kModel;
  EXPECT_EQ(run(g + " --prompt-ids 1,x -n 2", &out), 2);
  EXPECT_EQ(run(g + " --prompt-ids 1,999999 -n 2", &out), 2);
  EXPECT_EQ(run(std::string(MLACONF_CLI) + " generate --model /nonexistent.gguf --prompt-ids 1 -n 2", &out), 2);
  EXPECT_EQ(run(g + " --prompt-ids 1 --precision f16", &out), 2);
  EXPECT_EQ(run(g + " --prompt hello --prompt-ids 1 -n 2", &out), 2) << "a text prompt and ids together";
}


struct Registrar {
  Registrar() {
    register_case("reference", "cli_generate(case=greedy200x24,precision=f32,json)", [] { generate_json("f32"); });
    register_case("reference", "cli_generate(case=greedy200x24,precision=f64,json)", [] { generate_json("f64"); });
    register_case("reference", "cli_generate(bad_input)", [] { exit_codes(); });
  }
} registrar;

}  // namespace
}  // namespace mlaconf::test
