// `--devices` (the CUDA pipeline's layer split, issue 11) on generate, capture and bench through the CLI,
// on a freshly synthesized model: bad lists and a split without the CUDA backend are bad input (exit 2,
// one error line); with --backend cuda it is a real run on a GPU machine (suites/gpu/test_split.cpp
// checks the logits there) and exit 3 with the reason elsewhere.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "suites/generation/gen_util.h"

namespace mlaconf::gentest {
namespace {

struct Tmp {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("mlaconf-devices-" + std::to_string(::getpid()));
  Tmp() { std::filesystem::create_directories(dir); }
  ~Tmp() { std::filesystem::remove_all(dir); }
};

// run_process appends to out / err: start each run empty.
int run(const std::vector<std::string>& argv, std::string* out, std::string* err) {
  out->clear();
  err->clear();
  return run_process(argv, out, err);
}

void expect_one_error_line(int rc, const std::string& err, int want = 2) {
  EXPECT_EQ(rc, want) << err;
  EXPECT_EQ(err.rfind("mlaconf: error: ", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(cli_devices, bad_lists_and_backends) {
  Tmp t;
  const std::string model = (t.dir / "tiny.gguf").string(), h5 = (t.dir / "x.h5").string();
  std::string out, err;
  ASSERT_EQ(run_process({MLACONF_CLI, "synth", "--seed", "3", "--out", model}, &out, &err), 0) << err;
  const std::vector<std::string> gen = {MLACONF_CLI, "generate", "--model", model, "--prompt-ids", "1,2,3", "-n", "2"};
  for (const char* bad : {"a", "0,,1", "0,", "-1", "0;1"}) {
    auto argv = gen;
    for (const char* a : {"--backend", "cuda", "--devices"}) argv.push_back(a);
    argv.push_back(bad);
    expect_one_error_line(run(argv, &out, &err), err);
    EXPECT_NE(err.find("--devices"), std::string::npos) << err;
  }
  auto argv = gen;
  for (const char* a : {"--backend", "reference", "--devices", "0,0"}) argv.push_back(a);
  expect_one_error_line(run(argv, &out, &err), err);
  expect_one_error_line(run({MLACONF_CLI, "bench", "--model", model, "--devices", "0,0"}, &out, &err), err);
  expect_one_error_line(run({MLACONF_CLI, "capture", "--model", model, "--random-tokens", "4", "--devices", "0,0",
                                     "--out", h5}, &out, &err), err);
  EXPECT_FALSE(std::filesystem::exists(h5));
}

TEST(cli_devices, cuda_split_runs_or_is_not_supported) {
  Tmp t;
  const std::string model = (t.dir / "tiny.gguf").string();
  std::string out, err;
  ASSERT_EQ(run_process({MLACONF_CLI, "synth", "--seed", "3", "--out", model}, &out, &err), 0) << err;
  const int rc = run_process({MLACONF_CLI, "generate", "--model", model, "--prompt-ids", "1,2,3", "-n", "2", "--backend",
                              "cuda", "--devices", "0,0", "--json"}, &out, &err);
  if (rc == 3) {
    EXPECT_NE(err.find("not supported: "), std::string::npos) << err;
  } else {
    EXPECT_EQ(rc, 0) << err;
    EXPECT_NE(out.find("devices 0,0: layers "), std::string::npos) << out;  // the backend names its split
  }
}

}  // namespace
}  // namespace mlaconf::gentest
