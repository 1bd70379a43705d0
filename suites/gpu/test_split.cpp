// suites/gpu: the layer split of the CUDA pipeline (issue 11), on one GPU through "virtual devices"
// (PipelineOptions::devices {0,0} and {0,0,0}: the same ordinal for every stage, so the stage hand-offs,
// the per-stage buffers and copies all run). The arithmetic of each layer is unchanged by the split, so
// the logits must be BIT-identical to the unsplit run on the same GPU: a prefill (T > 8: the dequant +
// GEMM path) and decode steps (T = 1: the fused GEMVs), compared with memcmp. Models: the tiny model
// (4 layers) and a synthesized model of 3.9 GB (GLM-5 dims: hidden 6144, 64 heads, vocab 154880;
// 4 layers, 32 experts): path in MLACONF_SPLIT_MODEL, or synthesized here through MLACONF_CLI (in
// /tmp, removed afterwards). Negative controls: the fault "split-no-handoff" (the next stage starts from
// its fresh, poisoned buffer instead of the copied hidden state) must be caught (the overflow check
// names the op; with the check off the logits differ) and leaves the unsplit run alone; another prompt
// changes the logits (the comparison can fail). The generation check split: `generate --backend both
// --devices 0,0` (and 0,0,0) agrees with the reference.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "core/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "optimized/faults.h"
#include "optimized/pipeline.h"
#include "suites/gpu/gpu_test_util.h"

namespace mlaconf::gputest {
namespace {

std::string shared_tiny() {
  const char* env = std::getenv("MLACONF_SHARED_DIR");
  return std::string(env ? env : MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.gguf";
}

// The CLI: environment MLACONF_CLI (a binary carried to a GPU machine), else the one built beside this test.
std::string cli() {
  const char* env = std::getenv("MLACONF_CLI");
  return env ? env : MLACONF_CLI;
}

std::vector<int32_t> ids_for(int64_t T, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(T);
  for (auto& x : ids) x = (int32_t)(rng() % (vocab - 16));
  return ids;
}

// Prefill of T tokens then `steps` greedy decode steps; every pass's logits, concatenated.
std::vector<float> run(const GgufFile& f, const ModelConfig& c, const std::vector<int>& devices, int64_t T, int64_t steps,
                       uint64_t seed, std::string* summary = nullptr) {
  cuda::PipelineOptions o;
  o.max_ctx = T + steps + 1;
  o.devices = devices;
  cuda::Pipeline p(f, c, o);
  if (summary) *summary = p.split_summary();
  std::vector<float> all = p.forward(ids_for(T, c.n_vocab, seed));
  int32_t next = 0;
  for (int64_t s = 0; s < steps; ++s) {
    const float* row = all.data() + all.size() - c.n_vocab;
    next = (int32_t)(std::max_element(row, row + c.n_vocab) - row);
    std::vector<float> lg = p.forward(std::vector<int32_t>{next});
    all.insert(all.end(), lg.begin(), lg.end());
  }
  return all;
}

void expect_bit_identical(const std::string& model, int64_t T, int64_t steps) {
  GgufFile f = GgufFile::open(model);
  ModelConfig c = ModelConfig::from_gguf(f);
  const std::vector<float> base = run(f, c, {}, T, steps, 7);
  ASSERT_TRUE(all_finite(base));
  for (const std::vector<int>& devs : {std::vector<int>{0}, std::vector<int>{0, 0}, std::vector<int>{0, 0, 0}}) {
    if ((int64_t)devs.size() > c.n_layer_run()) continue;
    std::string summary;
    const std::vector<float> split = run(f, c, devs, T, steps, 7, &summary);
    ASSERT_EQ(split.size(), base.size());
    size_t differ = 0;
    for (size_t i = 0; i < base.size(); ++i) differ += std::memcmp(&base[i], &split[i], 4) != 0;
    EXPECT_EQ(differ, 0u) << summary << ": " << differ << " of " << base.size() << " logits differ from the unsplit run";
    // The plan may leave a stage empty (it minimizes the largest device: the head weighs on the last one);
    // the hand-offs are exercised where it does not. Said, not asserted.
    if (summary.find(" -") != std::string::npos) std::printf("  note: %s leaves a stage without layers\n", summary.c_str());
    std::printf("  %s: %zu logits bit-identical to the unsplit run\n", summary.c_str(), base.size());
  }
  // Negative control: the comparison sees a different prompt (it can fail).
  const std::vector<float> other = run(f, c, {0, 0}, T, steps, 8);
  size_t differ = 0;
  for (size_t i = 0; i < base.size(); ++i) differ += std::memcmp(&base[i], &other[i], 4) != 0;
  EXPECT_GT(differ, base.size() / 2) << "another prompt must change the logits";
}

TEST(split, tiny_virtual_devices_bit_identical) {
  MLACONF_REQUIRE_CUDA();
  if (!std::filesystem::exists(shared_tiny())) GTEST_SKIP() << "skipped: " << shared_tiny() << " is absent";
  expect_bit_identical(shared_tiny(), 40, 6);
}

TEST(split, lost_handoff_is_caught) {
  MLACONF_REQUIRE_CUDA();
  if (!std::filesystem::exists(shared_tiny())) GTEST_SKIP() << "skipped: " << shared_tiny() << " is absent";
  GgufFile f = GgufFile::open(shared_tiny());
  ModelConfig c = ModelConfig::from_gguf(f);
  const std::vector<float> base = run(f, c, {}, 12, 0, 7);
  cuda::ScopedFault fault(cuda::Fault::SplitNoHandoff);
  EXPECT_THROW(run(f, c, {0, 0}, 12, 0, 7), cuda::OverflowError) << "the next stage read a poisoned hidden state";
  EXPECT_EQ(run(f, c, {}, 12, 0, 7), base) << "no split, no hand-off: the fault changes nothing";
}

TEST(split, bad_devices_are_input_errors) {
  MLACONF_REQUIRE_CUDA();
  if (!std::filesystem::exists(shared_tiny())) GTEST_SKIP() << "skipped: " << shared_tiny() << " is absent";
  GgufFile f = GgufFile::open(shared_tiny());
  ModelConfig c = ModelConfig::from_gguf(f);
  cuda::PipelineOptions o;
  o.devices = {0, 1000};
  EXPECT_THROW(cuda::Pipeline(f, c, o), InputError) << "a device that does not exist";
  o.devices = std::vector<int>((size_t)c.n_layer_run() + 1, 0);
  EXPECT_THROW(cuda::Pipeline(f, c, o), InputError) << "more stages than layers";
}

int sh(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
}

// The several-GB model: MLACONF_SPLIT_MODEL, or synthesized once here (removed when the process exits).
std::string big_model() {
  if (const char* e = std::getenv("MLACONF_SPLIT_MODEL")) return e;
  static struct Owned {
    std::string dir, path;
    ~Owned() {
      if (!dir.empty()) std::filesystem::remove_all(dir);
    }
  } owned;
  if (owned.path.empty()) {
    owned.dir = (std::filesystem::temp_directory_path() / ("mlaconf-split-" + std::to_string(getpid()))).string();
    std::filesystem::create_directories(owned.dir);
    const std::string p = owned.dir + "/glm5-dims-4layers-32experts.gguf";
    if (sh(cli() + " synth --preset glm5 --layers 4 --dense-lead 1 --experts 32 --type-default Q4_K "
                                      "--type output.weight=Q6_K --seed 3 -o " + p + " >/dev/null") == 0)
      owned.path = p;
  }
  return owned.path;
}

TEST(split, several_gb_model_virtual_devices_bit_identical) {
  MLACONF_REQUIRE_CUDA();
  if (!std::filesystem::exists(cli()) && !std::getenv("MLACONF_SPLIT_MODEL"))
    GTEST_SKIP() << "skipped: " << cli() << " not built (needed to synthesize the model)";
  const std::string m = big_model();
  ASSERT_FALSE(m.empty()) << "synth failed";
  GgufFile f = GgufFile::open(m);
  EXPECT_GT(f.total_file_size(), uint64_t{2} << 30) << "several GB";
  expect_bit_identical(m, 24, 3);
}

// Shared-indexer layers read an earlier layer's top-k list: across a stage boundary it is copied to the
// reading stage (and on again to a later one). Tiny dims, indexer types F S S S: layers 1-3 use layer 0's.
TEST(split, shared_indexer_across_stages_bit_identical) {
  MLACONF_REQUIRE_CUDA();
  if (!std::filesystem::exists(cli())) GTEST_SKIP() << "skipped: " << cli() << " not built";
  const std::string dir = (std::filesystem::temp_directory_path() / ("mlaconf-split-fsss-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string m = dir + "/tiny-fsss.gguf";
  ASSERT_EQ(sh(cli() + " synth --seed 5 --indexer-types FSSS --top-k 8 -o " + m + " >/dev/null"), 0);
  expect_bit_identical(m, 30, 4);
  std::filesystem::remove_all(dir);
}

// The generation check runs split: the reference against the pipeline on virtual devices.
TEST(split, generation_check_passes_split) {
  MLACONF_REQUIRE_CUDA();
  if (!std::filesystem::exists(shared_tiny())) GTEST_SKIP() << "skipped: " << shared_tiny() << " is absent";
  if (!std::filesystem::exists(cli())) GTEST_SKIP() << "skipped: " << cli() << " not built";
  for (const char* devs : {"0,0", "0,0,0"}) {
    const std::string cmd = cli() + " generate --model " + shared_tiny() +
                            " --prompt-ids 11,22,33,44,55,66,77,88,99,111 -n 12 --ignore-eos --backend both --devices " +
                            devs + " --json >/dev/null";
    EXPECT_EQ(sh(cmd), 0) << cmd;
  }
}

}  // namespace
}  // namespace mlaconf::gputest
