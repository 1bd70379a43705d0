// `mlaconf bench --batch` (batched decode of the CUDA pipeline) through the CLI on a freshly synthesized
// model: exit 2 for bad input (a bad list, --batch without --backend cuda, --context or --step-by-step
// without --batch), and on a GPU machine a real run whose JSON has one row per B with positive tokens/s and a
// floor, and --graph runs whose timed steps are queued one ahead, or step by step with --step-by-step;
// elsewhere exit 3 with the reason.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "suites/common/case_registry.h"
#include "suites/generation/gen_util.h"

namespace mlaconf::gentest {
namespace {

void bench_batch_cli() {
  auto dir = std::filesystem::temp_directory_path() / ("mlaconf-bench-batch-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "tiny.gguf").string();
  std::string out, err;
  ASSERT_EQ(run_process({MLACONF_CLI, "synth", "--seed", "3", "--out", model}, &out, &err), 0) << err;
  for (const char* bad : {"0", "1,x", "5000", ",", "2,1.5", "1,,8", "8,", "1 8"}) {
    EXPECT_EQ(run_process({MLACONF_CLI, "bench", "--model", model, "--backend", "cuda", "--batch", bad}, &out, &err), 2)
        << "--batch '" << bad << "'";
  }
  EXPECT_EQ(run_process({MLACONF_CLI, "bench", "--model", model, "--batch", "1,2"}, &out, &err), 2) << "reference backend";
  EXPECT_EQ(run_process({MLACONF_CLI, "bench", "--model", model, "--context", "8"}, &out, &err), 2) << "--context alone";
  EXPECT_EQ(run_process({MLACONF_CLI, "bench", "--model", model, "--step-by-step"}, &out, &err), 2) << "--step-by-step alone";
  const int rc = run_process({MLACONF_CLI, "bench", "--model", model, "--backend", "cuda", "--batch", "1,3", "--context", "70",
                              "--prompt-tokens", "5", "--decode-steps", "3", "--json"},
                             &out, &err);
  if (rc == 3) {
    EXPECT_NE(err.find("not supported: "), std::string::npos) << err;
  } else {
    ASSERT_EQ(rc, 0) << err;
    EXPECT_NE(out.find("\"batches\""), std::string::npos) << out;
    EXPECT_NE(out.find("\"batch\": 3"), std::string::npos) << out;
    EXPECT_NE(out.find("\"floor_ms_per_step\""), std::string::npos) << out;
    EXPECT_EQ(out.find("\"decode_tokens_per_s\": 0.0"), std::string::npos) << out;
    EXPECT_NE(out.find("\"steps_queued_ahead\": false"), std::string::npos) << "direct steps: " << out;
    for (const bool one_by_one : {false, true}) {
      std::vector<std::string> cmd = {MLACONF_CLI, "bench", "--model", model, "--backend", "cuda", "--batch", "2", "--context", "40",
                                      "--prompt-tokens", "5", "--decode-steps", "5", "--graph", "--json"};
      if (one_by_one) cmd.push_back("--step-by-step");
      ASSERT_EQ(run_process(cmd, &out, &err), 0) << err;
      EXPECT_NE(out.find(one_by_one ? "\"steps_queued_ahead\": false" : "\"steps_queued_ahead\": true"), std::string::npos) << out;
      EXPECT_EQ(out.find("\"decode_tokens_per_s\": 0.0"), std::string::npos) << out;
    }
  }
  std::filesystem::remove_all(dir);
}

struct Registrar {
  Registrar() { mlaconf::test::register_case("generation", "cli_bench_batch(model=synth_tiny,seed=3)", bench_batch_cli); }
} registrar;

}  // namespace
}  // namespace mlaconf::gentest
