// `mlaconf kld --backend cuda` on the tiny model over the project's corpus (default --ctx: 512, six
// windows): the CUDA pipeline's Mean KLD against the f64 reference is within a bound, and the planted
// dense-attention fault (optimized/faults.h) is at least 10x outside it. Skips with the reason where the
// CUDA backend is not supported (a CPU build, no device). bench/gpu_kld_check.sh runs the same two
// commands on a GPU machine and prints the figures the bound comes from.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/json.h"
#include "suites/common/case_registry.h"
#include "suites/generation/gen_util.h"

namespace mlaconf::gentest {
namespace {

const std::string kCorpus = std::string(MLACONF_SOURCE_DIR) + "/data/corpus/plain-prose.txt";

// Measured on the H200 (2026-12-01, bench/gpu_kld_check.sh, docs/KLD.md): the clean CUDA run's Mean KLD
// is 0.00206 ± 0.0004 nats over all 3072 positions and 0.00236 beyond top_k; it sits in the upper tail
// (the Median is 2.2e-7, the 75th percentile 8e-6), most likely decision flips at near-ties. The bound is about 10x
// the measured mean. The dense-attention fault measured 0.726 / 0.830 (36x / 41x the bound).
constexpr double kCudaMeanKldBound = 0.02;  // nats
// The typical position, free of flips: measured Median 2.2e-7 (all) / 3.8e-7 (beyond top_k); the fault's
// Median is 0.75 / 0.81.
constexpr double kCudaMedianKldBound = 4e-6;  // nats
// The fault must be at least this many times the bound (issue 14: separated by at least 10x).
constexpr double kFaultSeparation = 10.0;

struct Result {
  int rc = -1;
  std::string err;
  Json j;
};
Result cuda_kld(const std::string& fault) {
  std::vector<std::string> argv = {MLACONF_CLI, "kld", "--model", tiny_model(), "--text-file", kCorpus, "--backend", "cuda", "--json"};
  if (!fault.empty()) {
    argv.push_back("--fault");
    argv.push_back(fault);
  }
  Result r;
  std::string out;
  r.rc = run_process(argv, &out, &r.err);
  if (r.rc == 0) r.j = json_parse(out, "kld --json");
  return r;
}

double mean_kld(const Json& j, const char* part) { return j.at(part).at("kld").at("mean").get<double>(); }
double median_kld(const Json& j, const char* part) { return j.at(part).at("kld").at("median").get<double>(); }

void print(const char* what, const Json& j) {
  for (const char* part : {"all", "beyond_topk"}) {
    const Json& s = j.at(part);
    std::printf("%s %s: %lld positions, Mean KLD %.4g ± %.2g, Median %.4g, 99.0%% %.4g, Max %.4g, RMS Δp %.4g%%, Same top p %.3f%%\n",
                what, part, s.at("positions").get<long long>(), s.at("kld").at("mean").get<double>(),
                s.at("kld").at("stderr").get<double>(), s.at("kld").at("median").get<double>(),
                s.at("kld").at("p99").get<double>(), s.at("kld").at("max").get<double>(),
                100 * s.at("delta_p").at("rms").get<double>(), 100 * s.at("same_top").at("p").get<double>());
  }
}

#define REQUIRE_CLI_AND_MODEL()                                                                               \
  do {                                                                                                        \
    if (!std::filesystem::exists(MLACONF_CLI)) GTEST_SKIP() << "skipped: " << MLACONF_CLI << " is not built"; \
    if (!std::filesystem::exists(tiny_model())) GTEST_SKIP() << "skipped: shared data absent (" << tiny_model() << ")"; \
  } while (0)

void cuda_within_bound() {
  REQUIRE_CLI_AND_MODEL();
  const Result r = cuda_kld("");
  if (r.rc == 3) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.rc, 0) << r.err;
  print("cuda", r.j);
  EXPECT_EQ(r.j.at("all").at("nonfinite_test_rows"), 0);
  for (const char* part : {"all", "beyond_topk"}) {
    EXPECT_LE(mean_kld(r.j, part), kCudaMeanKldBound) << part;
    EXPECT_LE(median_kld(r.j, part), kCudaMedianKldBound) << part;
  }
}

void dense_attention_far_outside() {
  REQUIRE_CLI_AND_MODEL();
  const Result r = cuda_kld("dense-attention");
  if (r.rc == 3) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.rc, 0) << r.err;
  print("cuda dense-attention", r.j);
  for (const char* part : {"all", "beyond_topk"}) {
    EXPECT_GE(mean_kld(r.j, part), kFaultSeparation * kCudaMeanKldBound) << part;
    EXPECT_GE(median_kld(r.j, part), kFaultSeparation * kCudaMedianKldBound) << part;
  }
}

const bool registered = [] {
  using mlaconf::test::register_case;
  register_case("generation", "kld(backend=cuda,model=glm_dsa_tiny,corpus=plain_prose)", cuda_within_bound);
  register_case("generation", "kld_fault(fault=dense_attention,backend=cuda,model=glm_dsa_tiny,corpus=plain_prose)",
                dense_attention_far_outside);
  return true;
}();

}  // namespace
}  // namespace mlaconf::gentest
