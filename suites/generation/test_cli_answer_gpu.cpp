// `mlaconf answer --backend cuda` then `compare`: the CUDA pipeline's op replay passes every op of the
// committed fixture and of two synthesized models unlike the tiny one, and each fault of
// optimized/faults.h is caught and named as the first failing op, the op it breaks. Every case skips with
// the reason where the CUDA backend is not supported (no device, a CPU build).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/json.h"
#include "suites/common/case_registry.h"
#include "suites/generation/gen_util.h"

namespace mlaconf::gentest {
namespace {

const std::string kCommitted = std::string(MLACONF_SOURCE_DIR) + "/fixtures/data/tiny-seed1.h5";

std::filesystem::path work_dir() {
  static std::filesystem::path d = [] {
    auto p = std::filesystem::temp_directory_path() / ("mlaconf-answer-gpu-" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(std::filesystem::temp_directory_path() / ("mlaconf-answer-gpu-" + std::to_string(::getpid())), ec);
    });
    return p;
  }();
  return d;
}

std::string run_ok(const std::vector<std::string>& argv) {
  std::string out, err;
  EXPECT_EQ(run_process(argv, &out, &err), 0) << err;
  return out;
}

// A model and its reference f64 fixture (made once per process).
struct Subject {
  std::string model, fixture;
};
const Subject& tiny() {  // the committed fixture's model: mlaconf synth --seed 1
  static Subject s = [] {
    Subject x{(work_dir() / "tiny-seed1.gguf").string(), kCommitted};
    run_ok({MLACONF_CLI, "synth", "--seed", "1", "-o", x.model});
    return x;
  }();
  return s;
}
// One indexer head: about half the relu scores are exactly 0, so many rows hold exact ties at the cut.
const Subject& ties() {
  static Subject s = [] {
    Subject x{(work_dir() / "ties.gguf").string(), (work_dir() / "ties.h5").string()};
    run_ok({MLACONF_CLI, "synth", "--seed", "5", "--indexer-heads", "1", "--top-k", "32", "--n-head", "6", "--layers", "2",
            "--dense-lead", "1", "-o", x.model});
    run_ok({MLACONF_CLI, "capture", "--quiet", "--model", x.model, "--layers", "all", "--random-tokens", "120", "--seed", "3",
            "--decode-steps", "1", "--precision", "f64", "--out", x.fixture});
    return x;
  }();
  return s;
}
// glm-dsa, 6 heads, 2 indexer heads, top-k 32, group-limited routing (deepseek32 synthesizes YaRN RoPE scaling,
// which the CUDA pipeline does not run: exit 3).
const Subject& stress() {
  static Subject s = [] {
    Subject x{(work_dir() / "s7.gguf").string(), (work_dir() / "s7.h5").string()};
    run_ok({MLACONF_CLI, "synth", "--seed", "7", "--n-head", "6", "--indexer-heads", "2", "--top-k", "32",
            "--experts", "16", "--experts-used", "4", "--expert-groups", "4", "--groups-used", "2", "--layers", "3", "--dense-lead", "1",
            "-o", x.model});
    run_ok({MLACONF_CLI, "capture", "--quiet", "--model", x.model, "--layers", "all", "--random-tokens", "90", "--seed", "3",
            "--decode-steps", "2", "--precision", "f64", "--out", x.fixture});
    return x;
  }();
  return s;
}

// answer --backend cuda [--fault F] -> compare; checks the exit code and the first failing op ("" = none).
void cuda_answer(const Subject& s, const std::string& fault, const std::string& want_first) {
  const std::string out = (work_dir() / ("answer-" + std::filesystem::path(s.model).stem().string() + "-" + (fault.empty() ? "none" : fault) + ".h5")).string();
  std::vector<std::string> argv = {MLACONF_CLI, "answer", s.fixture, "--model", s.model, "--backend", "cuda", "--quiet", "--out", out};
  if (!fault.empty()) {
    argv.push_back("--fault");
    argv.push_back(fault);
  }
  std::string o, err;
  const int rc = run_process(argv, &o, &err);
  if (rc == 3) GTEST_SKIP() << err;
  ASSERT_EQ(rc, 0) << err;
  const int crc = run_process({MLACONF_CLI, "compare", s.fixture, out, "--json", out + ".json"}, &o, &err);
  EXPECT_EQ(crc, want_first.empty() ? 0 : 1) << o << err;
  std::ifstream in(out + ".json");
  const Json j = json_parse(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), out + ".json");
  const std::string got = j.at("first_failure").is_null() ? "" : j.at("first_failure").at("op").get<std::string>();
  EXPECT_EQ(got, want_first) << o;
}

const bool registered = [] {
  using mlaconf::test::register_case;
  register_case("generation", "answer(backend=cuda,fixture=tiny_seed1)", [] { cuda_answer(tiny(), "", ""); });
  register_case("generation", "answer(backend=cuda,model=ties_hi1_k32)", [] { cuda_answer(ties(), "", ""); });
  register_case("generation", "answer(backend=cuda,model=glm_dsa_h6_hi2_k32_groups)", [] { cuda_answer(stress(), "", ""); });
  register_case("generation", "answer_fault(fault=dense_attention,fixture=tiny_seed1)",
                [] { cuda_answer(tiny(), "dense-attention", "attn_latent_out"); });
  register_case("generation", "answer_fault(fault=inject_overflow,fixture=tiny_seed1)", [] { cuda_answer(tiny(), "inject-overflow", "q_a"); });
  // top-k 64 over 32-row chunks: two split-K partials per query with more than 32 keys.
  register_case("generation", "answer_fault(fault=no_lse_merge,fixture=tiny_seed1)",
                [] { cuda_answer(tiny(), "no-lse-merge", "attn_latent_out"); });
  register_case("generation", "answer_fault(fault=topk_upper_tie,model=ties_hi1_k32)",
                [] { cuda_answer(ties(), "topk-upper-tie", "indexer_topk"); });
  return true;
}();

}  // namespace
}  // namespace mlaconf::gentest
