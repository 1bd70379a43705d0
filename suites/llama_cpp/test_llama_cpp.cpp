// suites/llama_cpp: llama.cpp, a backend this project did not write, judged layer by layer.
//
// The tiny model (`mlaconf synth --seed 1`) is captured by the reference in float64 past top_k (96
// tokens > 64, two decode steps); `mlaconf answer --backend llama.cpp` runs llama.cpp on the same ids and
// writes every node its eval callback shows that maps onto a dataset (docs/LLAMA_CPP.md); `compare`
// judges it. Negative control: the same answer judged against a capture whose reference ignored the
// indexer (dense attention) fails. Without llama.cpp (ci/llama_cpp.sh installs it): "not supported".
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <set>

#include "core/json.h"
#include "fixtures/fixture_file.h"
#include "suites/fixtures/util.h"

using namespace fxtest::cli_test;

namespace {

mlaconf::Json report(const std::string& json_path) {
  std::ifstream in(json_path);
  return mlaconf::json_parse(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), json_path);
}

// MLACONF_LLAMA_LIB (a folder holding libllama.so) as --llama-lib, else the llama_cpp package's.
std::string lib_arg() {
  const char* d = std::getenv("MLACONF_LLAMA_LIB");
  return d && *d ? " --llama-lib " + q(d) : std::string();
}

struct LlamaSetup {
  std::string model, fixture, dense, answer;
  std::string skip;  // "not supported: ..." when llama.cpp is absent
  std::string answer_log;
};

// Made once per process: the model, the fixtures, llama.cpp's answer.
const LlamaSetup& setup() {
  static LlamaSetup s = [] {
    LlamaSetup s;
    s.model = fxtest::tiny_seed1();
    if (s.model.empty()) return s;
    const std::string d = scratch();
    s.fixture = d + "/tiny-f64.h5";
    s.dense = d + "/tiny-dense-f64.h5";
    s.answer = d + "/llama.h5";
    const std::string cap = cli() + " capture --model " + q(s.model) + " --layers all --random-tokens 96 --seed 7 --decode-steps 2 --precision f64 --quiet";
    auto c1 = run(cap + " --out " + q(s.fixture));
    auto c2 = run(cap + " --dense-attention --out " + q(s.dense));
    if (c1.rc != 0 || c2.rc != 0) {
      s.fixture.clear();
      return s;
    }
    auto a = run(cli() + " answer " + q(s.fixture) + " --model " + q(s.model) + " --backend llama.cpp" + lib_arg() + " --out " + q(s.answer));
    s.answer_log = a.out;
    if (a.rc == 3) {
      const size_t p = a.out.find("not supported: ");
      s.skip = p == std::string::npos ? "not supported: llama.cpp" : a.out.substr(p, a.out.find('\n', p) - p);
    } else if (a.rc != 0) {
      s.answer.clear();
    }
    return s;
  }();
  return s;
}

#define REQUIRE_LLAMA_ANSWER()                                        \
  const LlamaSetup& S = setup();                                      \
  ASSERT_FALSE(S.model.empty()) << "synth failed";                    \
  ASSERT_FALSE(S.fixture.empty()) << "capture failed";                \
  if (!S.skip.empty()) {                                              \
    GTEST_SKIP() << S.skip;                                           \
  }                                                                   \
  ASSERT_FALSE(S.answer.empty()) << "answer failed:\n" << S.answer_log

TEST(LlamaCpp, AnswerHoldsItsOwnDecisionsAndListsUnmappedNodes) {
  REQUIRE_LLAMA_ANSWER();
  mlaconf::fx::FixtureFile A(S.answer);
  const std::string fwd = "forward(tokens=96,seed=7,precision=f64)";
  ASSERT_TRUE(std::find(A.cases().begin(), A.cases().end(), fwd) != A.cases().end()) << S.answer_log;
  EXPECT_EQ(A.case_kind(fwd), "full_forward");
  for (int l = 0; l < 4; ++l) {
    for (const char* n : {"input_hidden", "attn_out", "mlp_out", "output_hidden", "indexer_scores", "indexer_topk", "attn_latent_out",
                          "q_absorbed", "latent_cache", "indexer_q", "indexer_k"})
      EXPECT_TRUE(A.has(fwd, "layers/" + std::to_string(l) + "/" + n)) << "layer " << l << " " << n << "\n" << S.answer_log;
    if (l >= 1) {
      for (const char* n : {"router_ids", "router_weights", "expert_out", "shared_expert_out"})
        EXPECT_TRUE(A.has(fwd, "layers/" + std::to_string(l) + "/" + n)) << "layer " << l << " " << n;
    }
  }
  EXPECT_TRUE(A.has(fwd, "logits") && A.has(fwd, "final_norm"));
  // The decode steps are answered too, each against the whole cache.
  EXPECT_EQ(A.cases().size(), 3u);
  const std::string step2 = "decode(prompt=96,step=2,precision=f64)";
  ASSERT_TRUE(A.has(step2, "layers/1/latent_cache"));
  EXPECT_EQ(A.read(step2, "layers/1/latent_cache").shape, (std::vector<int64_t>{98, 576}));
  // Unmapped nodes are listed, not guessed; nothing the fixture holds is missing.
  const mlaconf::Json un = mlaconf::json_parse(A.root_string("llama_cpp_unmapped"), "llama_cpp_unmapped");
  EXPECT_GT(un.size(), 0u);
  const mlaconf::Json miss = mlaconf::json_parse(A.root_string("llama_cpp_missing"), "llama_cpp_missing");
  EXPECT_EQ(miss.size(), 0u) << A.root_string("llama_cpp_missing");
  EXPECT_NE(S.answer_log.find("nodes not mapped"), std::string::npos);
}

TEST(LlamaCpp, IndexerTopkPastTopkEqualsTheReference) {
  REQUIRE_LLAMA_ANSWER();
  mlaconf::fx::FixtureFile E(S.fixture), A(S.answer);
  const std::string fwd = "forward(tokens=96,seed=7,precision=f64)";
  int64_t rows = 0, equal = 0;
  for (int l = 0; l < 4; ++l) {
    auto e = E.read(fwd, "layers/" + std::to_string(l) + "/indexer_topk");
    auto a = A.read(fwd, "layers/" + std::to_string(l) + "/indexer_topk");
    ASSERT_EQ(e.shape, a.shape);
    const int64_t K = e.shape[1];
    for (int64_t t = 64; t < e.shape[0]; ++t) {  // rows past top_k: the indexer really selects
      ++rows;
      bool same = true;
      for (int64_t j = 0; j < K; ++j) same = same && e.v[t * K + j] == a.v[t * K + j];
      equal += same;
    }
  }
  // Near-ties may flip a row (attribution handles them); nearly every row must be the same set.
  EXPECT_GE(equal, rows * 9 / 10) << equal << " of " << rows << " rows past top_k have the reference's top-k set";
}

TEST(LlamaCpp, ComparePasses) {
  REQUIRE_LLAMA_ANSWER();
  const std::string js = S.answer + ".json";
  auto c = run(cli() + " compare " + q(S.fixture) + " " + q(S.answer) + " --precision bf16 --json " + q(js));
  EXPECT_EQ(c.rc, 0) << c.out;
  const mlaconf::Json j = report(js);
  EXPECT_TRUE(j.at("first_failure").is_null()) << c.out;
}

TEST(LlamaCpp, DenseReferenceIsNotLlamaCpp) {
  // Negative control: a reference that ignored the indexer differs from llama.cpp past top_k.
  REQUIRE_LLAMA_ANSWER();
  auto c = run(cli() + " compare " + q(S.dense) + " " + q(S.answer) + " --precision bf16 --brief");
  EXPECT_EQ(c.rc, 1) << c.out;
}

TEST(LlamaCpp, NoLibraryIsNotSupportedAndABadFolderIsBadInput) {
  const LlamaSetup& S = setup();
  ASSERT_FALSE(S.fixture.empty());
  const std::string base = cli() + " answer " + q(S.fixture) + " --model " + q(S.model) + " --backend llama.cpp --out " + q(scratch() + "/x.h5");
  auto a = run("MLACONF_PYTHON=/bin/false " + base);
  EXPECT_EQ(a.rc, 3) << a.out;
  EXPECT_NE(a.out.find("not supported: llama_cpp not installed"), std::string::npos) << a.out;
  auto b = run(base + " --llama-lib " + q(scratch()));
  EXPECT_EQ(b.rc, 2) << b.out;
  EXPECT_NE(b.out.find("no libllama.so"), std::string::npos) << b.out;
  auto c = run(base + " --layers 1");
  EXPECT_EQ(c.rc, 2) << c.out;
  EXPECT_FALSE(fxtest::exists(scratch() + "/x.h5"));
}

}  // namespace
