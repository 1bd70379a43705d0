// suites/generation: the three-way generation check, in process. From the oracle's greedy200x24 text:
//   1. the GGUF's tokenizer gives exactly HF's input_ids;
//   2. the reference (CPU, float32) picks HF's greedy token at every one of the 24 steps;
//   3. the CUDA pipeline does too (skipped without a device);
//   4. negative controls: dense attention in place of the indexer's sparse selection (the reference's
//      ModelOptions::dense_attention, the pipeline's "dense-attention" fault) must fail the same check.
// Each backend runs step by step on HF's prefix (the prompt, then HF's tokens so far), so every step is
// compared even after a split. A step whose token differs from HF's where HF's top-1 minus top-2 margin
// (float64) is at most the near-tie margin (gen_util.h: the judge's f32 class margin 1e-3 for the
// reference, its f16 class margin 0.1 for CUDA) is a near-tie: recorded (printed and as a test property), not a failure
// (fx::judge_tokens). Margins of equal steps are also held to HF's, as differences of logits: |reference
// - HF| <= the judge's logits max_rel at f32 (1.2e-5) times HF's largest |step logit|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <span>

#include "core/argmax.h"
#include "fixtures/fixture_file.h"
#include "fixtures/tolerances.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "reference/model.h"
#include "suites/generation/gen_util.h"
#include "tokenizer/tokenizer.h"
#ifdef MLACONF_HAVE_CUDA
#include "optimized/faults.h"
#include "optimized/pipeline.h"
#endif

namespace mlaconf::gentest {
namespace {

#define REQUIRE_SHARED()                                                                                   \
  do {                                                                                                     \
    if (!std::filesystem::exists(tiny_model()) || !std::filesystem::exists(tiny_oracle()))                 \
      GTEST_SKIP() << "skipped: shared data absent (" << tiny_model() << ", " << tiny_oracle() << ")";     \
  } while (0)

// The prompt ids from the text through the GGUF's tokenizer (checked against HF's in case tokenize).
std::vector<int32_t> encode_prompt(const GgufFile& f, const GreedyCase& g) {
  tok::Tokenizer t = tok::Tokenizer::from_gguf(f);
  return t.encode(g.text, {.add_bos = t.add_bos_default(), .parse_special = true});
}

// Step by step on HF's prefix: next(ids) appends ids and returns the last position's logits.
template <class Next>
void teacher_forced(Next next, const std::vector<int32_t>& prompt, const std::vector<int32_t>& truth,
                    std::vector<int32_t>* tokens, std::vector<double>* margins) {
  std::vector<int32_t> feed = prompt;
  for (size_t step = 0; step < truth.size(); ++step) {
    double margin = 0;
    tokens->push_back(argmax_lower(next(feed), &margin));
    margins->push_back(margin);
    feed.assign(1, truth[step]);
  }
}

void record(const Judgement& j, const char* who) {
  std::printf("  %s vs HF: %s\n", who, j.summary().c_str());
  testing::Test::RecordProperty("compared", static_cast<int>(j.compared));
  testing::Test::RecordProperty("equal", static_cast<int>(j.equal));
  testing::Test::RecordProperty("near_ties", static_cast<int>(j.near_ties.size()));
  for (size_t i = 0; i < j.near_ties.size(); ++i) testing::Test::RecordProperty("near_tie_" + std::to_string(i), j.near_ties[i]);
}

void tokenize_case(const std::string& group) {
  REQUIRE_SHARED();
  GreedyCase g = read_greedy_case(tiny_oracle(), group);
  GgufFile f = GgufFile::open(tiny_model());
  std::vector<int32_t> ids = encode_prompt(f, g);
  EXPECT_EQ(ids, g.input_ids) << "the GGUF tokenizer's ids for the oracle text differ from HF's";
  EXPECT_EQ(ids.size(), 200u);
}

// The reference on HF's prefix. dense: the negative control (must fail the judgement).
Judgement reference_run(const std::string& group, bool dense) {
  GreedyCase g = read_greedy_case(tiny_oracle(), group);
  GgufFile f = GgufFile::open(tiny_model());
  ModelConfig c = ModelConfig::from_gguf(f);
  std::vector<int32_t> prompt = encode_prompt(f, g);
  ref::ModelOptions o;
  o.dense_attention = dense;
  ref::Model<float> m(f, c, o);
  std::vector<int32_t> tokens;
  std::vector<double> margins;
  teacher_forced(
      [&](const std::vector<int32_t>& ids) {
        ref::Mat<float> lg = m.forward_last(ids);
        std::vector<double> v(static_cast<size_t>(lg.cols()));
        for (Eigen::Index i = 0; i < lg.cols(); ++i) v[i] = lg(lg.rows() - 1, i);
        return v;
      },
      prompt, g.tokens, &tokens, &margins);
  Judgement j = judge(tokens, margins, g.tokens, g.margins, /*same_prefix=*/true, reference_near_tie_margin());
  if (!dense) {
    double worst = 0;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == g.tokens[i]) worst = std::max(worst, std::abs(margins[i] - g.margins[i]));
    double scale = 0;
    for (double x : fx::FixtureFile(tiny_oracle()).read(group, "step_logits").v) scale = std::max(scale, std::abs(x));
    const double bound = fx::tolerance(fx::TolClass::Logits, "f32").max_rel * scale;
    std::printf("  reference f32: max |margin - HF margin| %.3e logits on equal steps (bound %.3e = logits max_rel x %.3g)\n",
                worst, bound, scale);
    EXPECT_LE(worst, bound) << "logits";
  }
  return j;
}

void reference_case(const std::string& group) {
  REQUIRE_SHARED();
  Judgement j = reference_run(group, false);
  record(j, "reference f32");
  EXPECT_FALSE(j.failed()) << j.summary();
  EXPECT_EQ(j.compared, 24);
}

void reference_negative_case(const std::string& group) {
  REQUIRE_SHARED();
  Judgement j = reference_run(group, true);
  record(j, "reference f32 with dense attention (negative control)");
  EXPECT_TRUE(j.failed()) << "dense attention must change a token outside a near-tie: " << j.summary();
}

#ifdef MLACONF_HAVE_CUDA
Judgement cuda_run(const std::string& group) {
  GreedyCase g = read_greedy_case(tiny_oracle(), group);
  GgufFile f = GgufFile::open(tiny_model());
  ModelConfig c = ModelConfig::from_gguf(f);
  std::vector<int32_t> prompt = encode_prompt(f, g);
  cuda::PipelineOptions o;
  o.max_ctx = static_cast<int64_t>(prompt.size() + g.tokens.size());
  cuda::Pipeline p(f, c, o);
  std::vector<int32_t> tokens;
  std::vector<double> margins;
  teacher_forced(
      [&](const std::vector<int32_t>& ids) {
        std::vector<float> lg = p.forward(ids);
        return std::vector<double>(lg.end() - c.n_vocab, lg.end());
      },
      prompt, g.tokens, &tokens, &margins);
  double worst = 0;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == g.tokens[i]) worst = std::max(worst, std::abs(margins[i] - g.margins[i]));
  std::printf("  cuda: max |margin - HF margin| %.3e logits on equal steps (recorded, not judged)\n", worst);
  return judge(tokens, margins, g.tokens, g.margins, /*same_prefix=*/true, cuda_near_tie_margin());
}
#endif

#ifdef MLACONF_HAVE_CUDA
#define REQUIRE_CUDA()                                                                      \
  do {                                                                                      \
    std::string why_;                                                                       \
    if (!cuda::cuda_available(&why_))                                                       \
      GTEST_SKIP() << "not supported: "                                                     \
                   << (why_.find("no CUDA device") == 0 ? why_ : "no CUDA device (" + why_ + ")"); \
  } while (0)
#else
#define REQUIRE_CUDA() GTEST_SKIP() << "not supported: no CUDA device (built without CUDA)"
#endif

void cuda_case(const std::string& group) {
  REQUIRE_SHARED();
  REQUIRE_CUDA();
#ifdef MLACONF_HAVE_CUDA
  Judgement j = cuda_run(group);
  record(j, "cuda");
  EXPECT_FALSE(j.failed()) << j.summary();
  EXPECT_EQ(j.compared, 24);
#endif
}

void cuda_negative_case(const std::string& group) {
  REQUIRE_SHARED();
  REQUIRE_CUDA();
#ifdef MLACONF_HAVE_CUDA
  cuda::ScopedFault fault(cuda::Fault::DenseAttention);
  Judgement j = cuda_run(group);
  record(j, "cuda with the dense-attention fault (negative control)");
  EXPECT_TRUE(j.failed()) << "dense attention must change a token outside a near-tie: " << j.summary();
#endif
}

struct Registrar {
  Registrar() {
    const std::string g = "greedy200x24";
    register_case("tokenize(case=" + g + ")", [g] { tokenize_case(g); });
    register_case("reference(case=" + g + ",dtype=f32)", [g] { reference_case(g); });
    register_case("reference(case=" + g + ",dtype=f32,fault=dense_attention)", [g] { reference_negative_case(g); });
    register_case("cuda(case=" + g + ")", [g] { cuda_case(g); });
    register_case("cuda(case=" + g + ",fault=dense_attention)", [g] { cuda_negative_case(g); });
  }
} registrar;

}  // namespace
}  // namespace mlaconf::gentest
