// suites/llama_cpp: llama.cpp, a backend this project did not write, judged layer by layer.
//
// Two models: the tiny model (`mlaconf synth --seed 1`, its quantized type mix) and the same dims with
// every matrix F32 (`--type-default F32`: llama.cpp then computes in f32 but for its f16 caches and
// flash attention). Each is captured by the reference in float64 past top_k (96 tokens > 64, two decode
// steps); `mlaconf answer --backend llama.cpp` runs llama.cpp on the same ids and writes every node its
// eval callback shows that maps onto a dataset (docs/LLAMA_CPP.md); `compare` judges it. Negative
// control: a reference that ignored the indexer (dense attention) is not what llama.cpp computed past
// top_k (first failure: layer 0 attn_latent_out), and is below top_k. Without llama.cpp
// (ci/llama_cpp.sh installs it) the cases report "not supported: llama_cpp not installed".
//
// The bounds here are this suite's, from the measurements in docs/LLAMA_CPP.md (about 5x above them);
// they are not a precision class of compare.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "core/json.h"
#include "fixtures/fixture_file.h"
#include "suites/fixtures/util.h"

using namespace fxtest::cli_test;

namespace {

const std::string kForward = "forward(tokens=96,seed=7,precision=f64)";

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

// A model, its f64 capture (and a dense-attention one), llama.cpp's answer; made once per process.
LlamaSetup make_setup(const std::string& name, const std::string& synth_args, int tokens) {
  LlamaSetup s;
  const std::string d = scratch();
  s.model = d + "/" + name + ".gguf";
  if (run(cli() + " synth --seed 1 " + synth_args + " -o " + q(s.model)).rc != 0) {
    s.model.clear();
    return s;
  }
  s.fixture = d + "/" + name + "-f64.h5";
  s.dense = d + "/" + name + "-dense-f64.h5";
  s.answer = d + "/" + name + "-llama.h5";
  const std::string cap = cli() + " capture --model " + q(s.model) + " --layers all --random-tokens " + std::to_string(tokens) +
                          " --seed 7 --decode-steps 2 --precision f64 --quiet";
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
}

const LlamaSetup& tiny() {
  static LlamaSetup s = make_setup("tiny", "", 96);
  return s;
}
const LlamaSetup& tiny_f32() {
  static LlamaSetup s = make_setup("tiny-f32", "--type-default F32", 96);
  return s;
}
const LlamaSetup& short_f32() {  // 48 tokens < top_k 64: sparse and dense attention are the same
  static LlamaSetup s = make_setup("short-f32", "--type-default F32", 48);
  return s;
}

#define REQUIRE_LLAMA_ANSWER(setup)                                   \
  const LlamaSetup& S = setup();                                      \
  ASSERT_FALSE(S.model.empty()) << "synth failed";                    \
  ASSERT_FALSE(S.fixture.empty()) << "capture failed";                \
  if (!S.skip.empty()) {                                              \
    GTEST_SKIP() << S.skip;                                           \
  }                                                                   \
  ASSERT_FALSE(S.answer.empty()) << "answer failed:\n" << S.answer_log

// compare's JSON report of EXPECTED against S.answer (extra: compare options).
mlaconf::Json compare_json(const LlamaSetup& S, const std::string& expected, const std::string& extra, int* rc, std::string* out) {
  const std::string js = S.answer + "." + std::to_string(std::hash<std::string>{}(expected + extra)) + ".json";
  auto c = run(cli() + " compare " + q(expected) + " " + q(S.answer) + " " + extra + " --json " + q(js));
  *rc = c.rc;
  *out = c.out;
  return report(js);
}

bool is_float_result(const mlaconf::Json& d) {
  const std::string cls = d.at("class").get<std::string>();
  return d.contains("nmse") && cls != "index_set" && cls != "exact_ids" && cls != "info";
}

TEST(LlamaCpp, AnswerHoldsItsOwnDecisionsAndListsUnmappedNodes) {
  REQUIRE_LLAMA_ANSWER(tiny);
  mlaconf::fx::FixtureFile A(S.answer);
  ASSERT_TRUE(std::find(A.cases().begin(), A.cases().end(), kForward) != A.cases().end()) << S.answer_log;
  EXPECT_EQ(A.case_kind(kForward), "full_forward");
  for (int l = 0; l < 4; ++l) {
    for (const char* n : {"input_hidden", "attn_out", "mlp_out", "output_hidden", "indexer_scores", "indexer_topk", "attn_latent_out",
                          "attn_v_out", "q_absorbed", "latent_cache", "indexer_q", "indexer_k", "indexer_weights"})
      EXPECT_TRUE(A.has(kForward, "layers/" + std::to_string(l) + "/" + n)) << "layer " << l << " " << n << "\n" << S.answer_log;
    if (l >= 1) {
      for (const char* n : {"router_ids", "router_weights", "router_logits", "expert_out", "shared_expert_out"})
        EXPECT_TRUE(A.has(kForward, "layers/" + std::to_string(l) + "/" + n)) << "layer " << l << " " << n;
    }
  }
  EXPECT_TRUE(A.has(kForward, "logits") && A.has(kForward, "final_norm"));
  // The decode steps are answered too, the cache datasets holding the whole cache.
  EXPECT_EQ(A.cases().size(), 3u);
  const std::string step2 = "decode(prompt=96,step=2,precision=f64)";
  ASSERT_TRUE(A.has(step2, "layers/1/latent_cache"));
  EXPECT_EQ(A.read(step2, "layers/1/latent_cache").shape, (std::vector<int64_t>{98, 576}));
  EXPECT_EQ(A.case_kind(step2), "decode_step");
  // Unmapped nodes are listed, not guessed; nothing the fixture holds is missing.
  const mlaconf::Json un = mlaconf::json_parse(A.root_string("llama_cpp_unmapped"), "llama_cpp_unmapped");
  EXPECT_GT(un.size(), 0u);
  const mlaconf::Json miss = mlaconf::json_parse(A.root_string("llama_cpp_missing"), "llama_cpp_missing");
  EXPECT_EQ(miss.size(), 0u) << A.root_string("llama_cpp_missing");
  EXPECT_NE(S.answer_log.find("nodes not mapped"), std::string::npos);
}

TEST(LlamaCpp, F32WeightsForwardPassesAtF16Bounds) {
  // Without quantized matrices llama.cpp computes in f32 but for its f16 caches and flash attention:
  // the forward pass is judged at the f16 bounds, decision-aware, and passes.
  REQUIRE_LLAMA_ANSWER(tiny_f32);
  int rc = 0;
  std::string out;
  const mlaconf::Json j = compare_json(S, S.fixture, "--precision f16 --filter " + q(kForward), &rc, &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_GE(j.at("rows_clean_at_end").get<int64_t>(), 90) << out;  // measured 95 of 96
}

TEST(LlamaCpp, F32WeightsDecodeStepsWithinTwiceF16Bounds) {
  // The decode steps' attention (one query against the f16 cache) is at most 1.9e-6 (measured), a little
  // over the f16 activation bound 1.5e-6: held here to 1e-5.
  REQUIRE_LLAMA_ANSWER(tiny_f32);
  int rc = 0;
  std::string out;
  const mlaconf::Json j = compare_json(S, S.fixture, "--precision f16", &rc, &out);
  int n = 0;
  for (const auto& d : j.at("datasets")) {
    if (!is_float_result(d)) continue;
    ++n;
    EXPECT_LE(d.at("nmse").get<double>(), 1e-5) << d.at("case") << " " << d.at("path");
  }
  EXPECT_GT(n, 200);
  for (const auto& d : j.at("datasets")) {
    if (d.at("class") != "index_set") continue;
    EXPECT_EQ(d.at("verdict"), "pass") << d.at("case") << " " << d.at("path") << " " << d.at("note");
  }
}

TEST(LlamaCpp, F32WeightsWithoutFlashAttentionPassAtF16Bounds) {
  // llama.cpp's other attention path (--flash-attn off: kq, softmax, kqv, then W_UV; attn_latent_out is
  // the node kqv-L, permuted): every case, the decode steps too, passes at the f16 bounds (measured:
  // attention nmse <= 2.1e-7; with CPU flash attention a decode step reaches 1.85e-6).
  REQUIRE_LLAMA_ANSWER(tiny_f32);
  const std::string out_path = scratch() + "/tiny-f32-nofa.h5";
  auto a = run(cli() + " answer " + q(S.fixture) + " --model " + q(S.model) + " --backend llama.cpp --flash-attn off --quiet" + lib_arg() +
               " --out " + q(out_path));
  ASSERT_EQ(a.rc, 0) << a.out;
  auto c = run(cli() + " compare " + q(S.fixture) + " " + q(out_path) + " --precision f16 --brief");
  EXPECT_EQ(c.rc, 0) << c.out;
  mlaconf::fx::FixtureFile A(out_path);
  EXPECT_TRUE(A.has(kForward, "layers/2/attn_latent_out"));
}

TEST(LlamaCpp, QuantizedErrorsAreWithinTheQ8Envelope) {
  // Quantized matrices: llama.cpp quantizes the activations (q8_K / q8_0, f16 for F16 matrices) and
  // the error grows from nmse 3e-5 (one matmul) to 1.7e-3 (layer 3's indexer scores) on clean rows.
  REQUIRE_LLAMA_ANSWER(tiny);
  int rc = 0;
  std::string out;
  const mlaconf::Json j = compare_json(S, S.fixture, "", &rc, &out);
  int n = 0;
  for (const auto& d : j.at("datasets")) {
    if (!is_float_result(d)) continue;
    ++n;
    EXPECT_LE(d.at("nmse").get<double>(), 1e-2) << d.at("case") << " " << d.at("path");
    EXPECT_LE(d.at("one_minus_cosine").get<double>(), 5e-3) << d.at("case") << " " << d.at("path");
  }
  EXPECT_GT(n, 200);
  // Layer 0's top-k (exact inputs): a differing row swaps one key of 64 at most (measured: 4 rows).
  mlaconf::fx::FixtureFile E(S.fixture), A(S.answer);
  auto e = E.read(kForward, "layers/0/indexer_topk"), a = A.read(kForward, "layers/0/indexer_topk");
  ASSERT_EQ(e.shape, a.shape);
  const int64_t K = e.shape[1];
  int differ = 0;
  for (int64_t t = 0; t < e.shape[0]; ++t) {
    std::set<double> se(e.v.begin() + t * K, e.v.begin() + (t + 1) * K), sa(a.v.begin() + t * K, a.v.begin() + (t + 1) * K);
    int common = 0;
    for (double x : se) common += sa.count(x) ? 1 : 0;
    differ += common != static_cast<int>(se.size());
    EXPECT_GE(common, static_cast<int>(se.size()) - 1) << "row " << t;
  }
  EXPECT_LE(differ, 10);
}

TEST(LlamaCpp, DenseReferenceFailsAtLayer0AttentionPastTopk) {
  // Negative control: judged against a reference that ignored the indexer, llama.cpp fails first at
  // the attention of layer 0 (96 rows > top_k 64).
  REQUIRE_LLAMA_ANSWER(tiny_f32);
  int rc = 0;
  std::string out;
  const mlaconf::Json j = compare_json(S, S.dense, "--precision f16 --filter " + q(kForward), &rc, &out);
  EXPECT_EQ(rc, 1) << out;
  ASSERT_FALSE(j.at("first_failure").is_null()) << out;
  EXPECT_EQ(j.at("first_failure").at("op"), "attn_latent_out") << out;
  EXPECT_EQ(j.at("first_failure").at("layer"), 0) << out;
}

TEST(LlamaCpp, DenseReferenceBelowTopkIsTheSparseOne) {
  // The same below top_k (48 tokens < 64): sparse and dense attention are one computation, so llama.cpp
  // gets the same verdict, dataset by dataset, against both references, and every attention dataset
  // passes: the verdict above is about sparsity, not noise. (At this length layer 3's indexer_scores
  // measure nmse 8.8e-7, over the f16 bound 8e-7, against both: docs/LLAMA_CPP.md.)
  REQUIRE_LLAMA_ANSWER(short_f32);
  const std::string f = "--precision f16 --filter " + q("forward(tokens=48,seed=7,precision=f64)");
  int rc_d = 0, rc_s = 0;
  std::string out_d, out_s;
  const mlaconf::Json jd = compare_json(S, S.dense, f, &rc_d, &out_d), js = compare_json(S, S.fixture, f, &rc_s, &out_s);
  EXPECT_EQ(rc_d, rc_s) << out_d << out_s;
  std::map<std::string, std::string> vs;
  for (const auto& d : js.at("datasets")) vs[d.at("path").get<std::string>()] = d.at("verdict").get<std::string>();
  int attn = 0;
  for (const auto& d : jd.at("datasets")) {
    const std::string p = d.at("path").get<std::string>();
    EXPECT_EQ(d.at("verdict").get<std::string>(), vs[p]) << p;
    if (d.at("op") == "attn_latent_out" || d.at("op") == "attn_out") {
      ++attn;
      EXPECT_EQ(d.at("verdict"), "pass") << p << " " << d.at("note");
    }
  }
  EXPECT_EQ(attn, 8);
}

// The dense release's libraries (llama-cpp-python 0.3.34: glm-dsa without its indexer): MLACONF_LLAMA_LIB_DENSE,
// else what ci/llama_cpp.sh unpacks from a cached wheel; "" when neither is there.
std::string dense_lib() {
  const char* d = std::getenv("MLACONF_LLAMA_LIB_DENSE");
  if (d && *d) return d;
  const char* home = std::getenv("HOME");
  const std::string c = std::string(home ? home : "") + "/.cache/mlaconf-llama-dense/lib";
  return std::ifstream(c + "/libllama.so").good() ? c : "";
}

// Follow mode (docs/LLAMA_CPP.md): llama.cpp answers S.fixture (with `lib`, "" = the installed one), the
// reference is captured again on llama.cpp's own decisions, and compare judges llama.cpp against it on
// every row at the answer's precision (llamacpp-cpu).
mlaconf::Json follow_verdict(const LlamaSetup& S, int tokens, const std::string& lib, int* rc, std::string* out) {
  const std::string tag = lib.empty() ? "installed" : "dense";
  const std::string ans = S.fixture + "." + tag + ".answer.h5", fol = S.fixture + "." + tag + ".follow.h5", js = fol + ".json";
  auto a = run(cli() + " answer " + q(S.fixture) + " --model " + q(S.model) + " --backend llama.cpp" +
               (lib.empty() ? lib_arg() : " --llama-lib " + q(lib)) + " --out " + q(ans));
  if (a.rc != 0) {
    *rc = -1;
    *out = a.out;
    return mlaconf::Json();
  }
  auto f = run(cli() + " capture --model " + q(S.model) + " --layers all --random-tokens " + std::to_string(tokens) +
               " --seed 7 --decode-steps 2 --precision f64 --quiet --force-decisions " + q(ans) + " --out " + q(fol));
  if (f.rc != 0) {
    *rc = -2;
    *out = f.out;
    return mlaconf::Json();
  }
  auto c = run(cli() + " compare " + q(fol) + " " + q(ans) + " --json " + q(js));
  *rc = c.rc;
  *out = c.out;
  return report(js);
}

const LlamaSetup& short_quantized() {  // 48 tokens < top_k 64, the tiny model's quantized weights
  static LlamaSetup s = make_setup("short-q", "", 48);
  return s;
}

TEST(LlamaCpp, FollowModeJudgesEveryRowAndPassesAtTheLlamacppClass) {
  // Quantized weights: llama.cpp's q8 activations flip near-tie decisions early, so attribution alone
  // keeps few rows; following its decisions judges all 98, each of its decisions against the
  // reference's near-tie flags, within the llamacpp-cpu class.
  REQUIRE_LLAMA_ANSWER(tiny);
  int rc = 0;
  std::string out;
  const mlaconf::Json j = follow_verdict(S, 96, "", &rc, &out);
  ASSERT_GE(rc, 0) << out;
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(j.at("rows_clean_at_end"), j.at("rows_total")) << out;
  EXPECT_EQ(j.at("rows_total"), 98) << out;
  int judged = 0;
  for (const auto& d : j.at("datasets"))
    if (is_float_result(d) && d.value("precision", "") == "llamacpp-cpu") ++judged;
  EXPECT_GT(judged, 100) << out;
}

TEST(LlamaCpp, DenseReleaseFailsExactlyOnTheRowsPastTopkInFollowMode) {
  // The negative control on a real llama.cpp: llama-cpp-python 0.3.34 ran glm-dsa dense. At 96 tokens
  // (top_k 64) it fails first at layer 0's attention on rows 64-95 exactly, the rows below top_k clean;
  // at 48 tokens it passes: the verdict is about sparsity.
  REQUIRE_LLAMA_ANSWER(tiny);
  const std::string lib = dense_lib();
  if (lib.empty()) GTEST_SKIP() << "not supported: the dense llama.cpp (llama-cpp-python 0.3.34) is not unpacked (ci/llama_cpp.sh)";
  int rc = 0;
  std::string out;
  const mlaconf::Json j = follow_verdict(S, 96, lib, &rc, &out);
  ASSERT_GE(rc, 0) << out;
  EXPECT_EQ(rc, 1) << out;
  const mlaconf::Json& ff = j.at("first_failure");
  ASSERT_FALSE(ff.is_null()) << out;
  EXPECT_EQ(ff.at("op"), "attn_latent_out") << out;
  EXPECT_EQ(ff.at("layer"), 0) << out;
  EXPECT_EQ(ff.at("case"), kForward) << out;
  for (const auto& d : j.at("datasets"))
    if (d.at("case") == kForward && d.at("path") == "layers/0/attn_latent_out") {
      EXPECT_EQ(d.at("row_verdict").at("failed_rows"), mlaconf::Json::array({mlaconf::Json::array({64, 95})})) << d.at("note");
      EXPECT_NE(d.at("row_verdict").at("diagnosis").get<std::string>().find("more keys than top_k (64)"), std::string::npos);
    }
  const LlamaSetup& B = short_quantized();
  ASSERT_FALSE(B.fixture.empty());
  const mlaconf::Json jb = follow_verdict(B, 48, lib, &rc, &out);
  EXPECT_EQ(rc, 0) << out;
}

TEST(LlamaCpp, NoLibraryIsNotSupportedAndABadFolderIsBadInput) {
  const LlamaSetup& S = tiny();
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
