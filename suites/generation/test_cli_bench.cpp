// `mlaconf bench` through the CLI on a freshly synthesized model (no ../shared needed): the JSON keys
// scripts read, positive timings, exit 2 for bad input, and exit 3 (with the reason) or a real run for
// --backend cuda.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <unistd.h>
#include <filesystem>
#include <string>

#include "suites/common/case_registry.h"
#include "suites/generation/gen_util.h"

namespace mlaconf::gentest {
namespace {

std::string synth_tiny(const std::filesystem::path& dir) {
  const std::string model = (dir / "tiny.gguf").string();
  std::string out, err;
  EXPECT_EQ(run_process({MLACONF_CLI, "synth", "--seed", "3", "--out", model}, &out, &err), 0) << err;
  return model;
}

// The number after "key": in a one-line JSON object; NaN when absent.
double json_scalar(const std::string& json, const std::string& key) {
  const std::string pat = "\"" + key + "\": ";
  const size_t p = json.find(pat);
  return p == std::string::npos ? std::nan("") : std::strtod(json.c_str() + p + pat.size(), nullptr);
}

void bench_reference_json() {
  auto dir = std::filesystem::temp_directory_path() / ("mlaconf-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model = synth_tiny(dir);
  std::string out, err;
  ASSERT_EQ(run_process({MLACONF_CLI, "bench", "--model", model, "--prompt-tokens", "70", "--decode-steps", "3", "--json"},
                        &out, &err), 0) << err;
  for (const char* key : {"prefill_s", "prefill_tokens_per_s", "decode_s", "decode_tokens_per_s"}) {
    EXPECT_GT(json_scalar(out, key), 0.0) << key << " in " << out;  // NaN (absent) fails too
  }
  EXPECT_EQ(json_scalar(out, "prompt_tokens"), 70.0);
  // Bad input: exit 2 with one error line.
  EXPECT_EQ(run_process({MLACONF_CLI, "bench", "--model", model, "--backend", "tpu"}, &out, &err), 2);
  EXPECT_EQ(run_process({MLACONF_CLI, "bench", "--model", model, "--prompt-tokens", "100000"}, &out, &err), 2);
  // CUDA: a real run on a GPU machine, else "not supported" with the reason.
  const int rc = run_process({MLACONF_CLI, "bench", "--model", model, "--backend", "cuda", "--prompt-tokens", "70",
                              "--decode-steps", "3", "--json"}, &out, &err);
  if (rc == 3) EXPECT_NE(err.find("not supported: "), std::string::npos) << err;
  else EXPECT_EQ(rc, 0) << err;
  std::filesystem::remove_all(dir);
}

struct Registrar {
  Registrar() { mlaconf::test::register_case("generation", "cli_bench(model=synth_tiny,seed=3)", bench_reference_json); }
} registrar;

}  // namespace
}  // namespace mlaconf::gentest
