// suites/gpu: the whole CUDA pipeline on ../shared/models/glm-dsa-tiny.gguf against the reference model
// (float64, in process), layer by layer and end to end, plus greedy generation and the dense-attention
// negative control. Tolerances (fp16 storage, fp32 accumulation, against float64):
//   per-layer attn_latent_out / attn_out / mlp_out / output_hidden NMSE <= 1e-4 and logits NMSE <= 1e-4,
//   cosine >= 0.9999, on every row, the pipeline running on the reference's discrete decisions (forced);
//   its own indexer top-k sets and router ids (recorded in that run) equal to the reference's wherever the
//   reference's gap exceeds the f16 class's tie gap (fixtures/tolerances);
//   greedy tokens equal wherever the reference margin is > 0.05.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "core/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/trace.h"
#include "fixtures/tolerances.h"
#include "optimized/faults.h"
#include "optimized/pipeline.h"
#include "suites/common/mem_trace.h"
#include "suites/gpu/gpu_test_util.h"
#ifdef MLACONF_HAVE_REF_MODEL
#include "reference/model.h"
#include "core/argmax.h"
#include "tools/backend/decision_trace.h"
#endif

namespace mlaconf::gputest {
namespace {

constexpr double kLayerNmse = 1e-4, kLogitNmse = 1e-4, kCos = 0.9999;

std::string tiny_model_path() {
  const char* env = std::getenv("MLACONF_SHARED_DIR");
  return std::string(env ? env : MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.gguf";
}

using test::MemTrace;

std::vector<int32_t> prompt_ids(int64_t T, int64_t vocab) {
  std::mt19937_64 rng(2026);
  std::vector<int32_t> ids(T);
  for (auto& x : ids) x = (int32_t)(rng() % (vocab - 16));  // ordinary tokens, not the special ones at the end
  return ids;
}

// The tiny model, its config and T prompt ids.
struct Tiny {
  GgufFile f;
  ModelConfig c;
  std::vector<int32_t> ids;
};
Tiny open_tiny(int64_t T) {
  GgufFile f = GgufFile::open(tiny_model_path());
  ModelConfig c = ModelConfig::from_gguf(f);
  std::vector<int32_t> ids = prompt_ids(T, c.n_vocab);
  return Tiny{std::move(f), std::move(c), std::move(ids)};
}

#define MLACONF_REQUIRE_TINY_MODEL()                                                                \
  MLACONF_REQUIRE_CUDA();                                                                           \
  if (!std::filesystem::exists(tiny_model_path())) GTEST_SKIP() << "skipped: " << tiny_model_path() << " is absent"

#ifdef MLACONF_HAVE_REF_MODEL
double nmse_d(const std::vector<double>& a, const std::vector<double>& b) {
  return nmse(std::vector<float>(a.begin(), a.end()), b);
}
double cos_d(const std::vector<double>& a, const std::vector<double>& b) {
  return cosine(std::vector<float>(a.begin(), a.end()), b);
}

// The pipeline's own decisions against the reference's (both recorded in the forced run, so no flip
// upstream can move a later one): a row whose indexer top-k set or router ids differ where the reference's
// gap is larger than the f16 class's tie gap is a failure; differences at near-ties are printed.
void expect_own_decisions(const be::DecisionTrace& ref, const be::DecisionTrace& own, const char* what) {
  const double tie_gap = fx::tolerance(fx::TolClass::Scores, "f16").tie_gap;
  const be::DecisionDiff d = be::first_decision_difference(ref, own, tie_gap);
  if (d.found)
    std::printf("  %s: %lld rows decide otherwise (first: layer %d row %lld %s, reference gap %.3g), %lld outside near-ties\n",
                what, (long long)d.differing_rows, d.layer, (long long)d.row, d.kind.c_str(), d.gap,
                (long long)d.rows_outside_ties);
  EXPECT_EQ(d.rows_outside_ties, 0) << what << ": decisions differ where the reference's gap exceeds the tie gap " << tie_gap;
}

// Layer by layer. The indexer's top-k and the router's top-k are discrete: where rounding flips a
// near-tie, that row legitimately differs from there on. So the pipeline runs on the reference's
// decisions (forced, as `capture --force-decisions` does) and every row of every layer is judged; its own
// decisions, recorded in the same run, must equal the reference's outside near-ties.
void layers_case(int64_t T) {
  MLACONF_REQUIRE_TINY_MODEL();
  auto [f, c, ids] = open_tiny(T);
  MemTrace rt, gt;
  be::DecisionTrace rdec(&rt), gdec(&gt);
  ref::Model<double> rm(f, c);
  rm.forward(ids, &rdec);
  cuda::Pipeline p(f, c);
  p.forward(ids, &gdec, &rdec.decisions());
  expect_own_decisions(rdec, gdec, "forward");
  for (int64_t l = 0; l < c.n_layer_run(); ++l) {
    for (const char* name : {op::kAttnLatentOut, op::kAttnOut, op::kMlpOut, op::kOutputHidden}) {
      auto *r = rt.get((int)l, name), *g = gt.get((int)l, name);
      ASSERT_TRUE(r && g) << "layer " << l << " " << name << " was not recorded by both";
      ASSERT_EQ(r->shape, g->shape) << name;
      const double e = nmse_d(g->v, r->v);
      std::printf("  layer %lld %-16s NMSE %.3e on all %lld rows (decisions forced)\n", (long long)l, name, e, (long long)T);
      EXPECT_LE(e, kLayerNmse) << "layer " << l << " " << name;
    }
  }
  auto *rl = rt.get(-1, op::kLogits), *gl = gt.get(-1, op::kLogits);
  ASSERT_TRUE(rl && gl);
  const double e = nmse_d(gl->v, rl->v), cs = cos_d(gl->v, rl->v);
  std::printf("  logits NMSE %.3e cosine %.9f on all rows (decisions forced)\n", e, cs);
  EXPECT_LE(e, kLogitNmse);
  EXPECT_GE(cs, kCos);
}

// Greedy generation: tokens equal to the reference wherever the reference margin is > 0.05; a split
// at a smaller margin ends the comparison (the contexts differ from there on).
// Greedy generation, free-running on both sides. A first divergence where the reference's margin is
// > 0.05 is attributed like `generate --backend both` does: the pipeline re-runs on the reference's
// decisions of every pass (indexer top-k rows, router ids) and the same prefix; if that forced run picks
// the reference's token at the step, the divergence came from an upstream decision taken the other way
// at a near-tie (reported), else it is a failure.
void greedy_case(int64_t T, int64_t n_new) {
  MLACONF_REQUIRE_TINY_MODEL();
  auto [f, c, ids] = open_tiny(T);
  ref::Model<double> rm(f, c);
  std::vector<be::DecisionTrace> dec(n_new);
  std::vector<int32_t> rtok;
  std::vector<double> rmarg;
  std::vector<int32_t> feed = ids;
  for (int64_t s = 0; s < n_new; ++s) {
    ref::Mat<double> lg = rm.forward_last(feed, &dec[s]);
    std::vector<double> row(lg.data(), lg.data() + lg.size());
    double m = 0;
    rtok.push_back(argmax_lower(row, &m));
    rmarg.push_back(m);
    feed.assign(1, rtok.back());
  }
  cuda::Pipeline p(f, c);
  std::vector<double> gm;
  auto gtoks = p.generate(ids, n_new, &gm);
  for (int i = 0; i < 3 && i < (int)gtoks.size(); ++i)
    std::printf("  step %d: cuda %d (margin %.3f) ref %d (margin %.3f)\n", i, gtoks[i], gm[i], rtok[i], rmarg[i]);
  ASSERT_EQ(gtoks.size(), rtok.size());
  int64_t compared = 0;
  for (size_t i = 0; i < gtoks.size(); ++i) {
    if (gtoks[i] != rtok[i]) {
      if (rmarg[i] > 0.05) {
        cuda::Pipeline pf(f, c);
        std::vector<int32_t> ff = ids;
        int32_t forced_tok = -1;
        for (size_t s = 0; s <= i; ++s) {
          std::vector<float> lg = pf.forward(ff, nullptr, &dec[s].decisions());
          std::vector<double> row(lg.end() - c.n_vocab, lg.end());
          forced_tok = argmax_lower(row);
          ff.assign(1, rtok[s]);
        }
        EXPECT_EQ(forced_tok, rtok[i]) << "step " << i << ": token " << gtoks[i] << " vs reference " << rtok[i]
                                       << " at reference margin " << rmarg[i] << ", and the run forced on the reference's "
                                       << "decisions picks " << forced_tok << ": not a decision flip";
        std::printf("  step %zu: divergence at reference margin %.3f; forced on the reference's decisions: token %d (%s)\n", i,
                    rmarg[i], forced_tok, forced_tok == rtok[i] ? "decision flip upstream" : "FAILURE");
      }
      break;
    }
    ++compared;
  }
  std::printf("  greedy: %lld of %lld tokens equal before the first split\n", (long long)compared, (long long)n_new);
}

// Negative control: dense attention (the indexer ignored) on a context longer than top_k fails the
// logits check; on a context shorter than top_k it passes.
void dense_case(int64_t T, bool expect_fail) {
  MLACONF_REQUIRE_TINY_MODEL();
  auto [f, c, ids] = open_tiny(T);
  ref::Model<double> rm(f, c);
  be::DecisionTrace rdec;
  auto r = rm.forward(ids, &rdec);
  std::vector<double> rv(r.data(), r.data() + r.size());
  cuda::ScopedFault fault(cuda::Fault::DenseAttention);
  cuda::Pipeline p(f, c);
  // On the reference's decisions, so that a routing near-tie cannot fail the clean half of the control;
  // the dense fault ignores the index lists, so forcing them cannot hide it.
  auto g = p.forward(ids, nullptr, &rdec.decisions());
  const double e = nmse(g, rv);
  std::printf("  dense attention T=%lld (top_k %lld): logits NMSE %.3e\n", (long long)T, (long long)c.indexer_top_k, e);
  if (expect_fail)
    EXPECT_GT(e, kLogitNmse);
  else
    EXPECT_LE(e, kLogitNmse);
}

// Prefill then token-by-token decode gives the same logits as the reference doing the same. The
// context stays below top_k (all causal keys selected) so no indexer selection can differ; the routing is
// forced to the reference's, and the pipeline's own routing must equal it outside near-ties.
// gemv: the dequant-GEMV kernels (the default's, or the tensor cores pinned at every Q4_K / Q6_K shape).
void decode_case(cuda::GemvKernel gemv = cuda::GemvKernel::Default) {
  MLACONF_REQUIRE_TINY_MODEL();
  auto f = GgufFile::open(tiny_model_path());
  auto c = ModelConfig::from_gguf(f);
  const int64_t n = std::min<int64_t>(60, c.indexer_top_k), pre = n - 20;
  auto ids = prompt_ids(n, c.n_vocab);
  ref::Model<double> rm(f, c);
  cuda::PipelineOptions o;
  o.gemv = gemv;
  cuda::Pipeline p(f, c, o);
  be::DecisionTrace rpre, gpre;  // the prefill on the reference's routing too: its cache rows follow from it
  rm.forward(std::span<const int32_t>(ids.data(), pre), &rpre);
  p.forward(std::span<const int32_t>(ids.data(), pre), &gpre, &rpre.decisions());
  expect_own_decisions(rpre, gpre, "prefill");
  double worst = 0;
  for (int64_t i = pre; i < n; ++i) {
    be::DecisionTrace rdec, gdec;  // each step on the reference's routing (no selection below top_k)
    auto r = rm.forward(std::span<const int32_t>(ids.data() + i, 1), &rdec);
    auto g = p.forward(std::span<const int32_t>(ids.data() + i, 1), &gdec, &rdec.decisions());
    expect_own_decisions(rdec, gdec, "decode step");
    std::vector<double> rv(r.data(), r.data() + r.size());
    worst = std::max(worst, nmse(g, rv));
    EXPECT_LE(nmse(g, rv), kLogitNmse) << "decode step at position " << i;
  }
  std::printf("  decode: worst logits NMSE %.3e over %lld steps after a %lld-token prefill\n", worst, (long long)(n - pre), (long long)pre);
  EXPECT_EQ(p.n_past(), n);
}
#endif

#ifdef MLACONF_HAVE_REF_MODEL
// A decode step after a prefill longer than top_k: the pipeline's decode against its own prefill of the
// same tokens (self-consistency, a decode-path bug shows here) and against the reference's decode step.
void long_decode_case(int64_t pre) {
  MLACONF_REQUIRE_TINY_MODEL();
  auto [f, c, ids] = open_tiny(pre + 1);
  const int64_t V = c.n_vocab;
  cuda::Pipeline p(f, c);
  auto full = p.forward(ids);  // prefill of pre+1 tokens
  p.reset();
  p.forward(std::span<const int32_t>(ids.data(), pre));
  MemTrace gt, rt;
  auto dec = p.forward(std::span<const int32_t>(ids.data() + pre, 1), &gt);
  std::vector<double> last(full.end() - V, full.end());
  const double self = nmse(dec, last);
  ref::Model<double> rm(f, c);
  rm.forward(std::span<const int32_t>(ids.data(), pre));
  auto r = rm.forward(std::span<const int32_t>(ids.data() + pre, 1), &rt);
  std::vector<double> rv(r.data(), r.data() + r.size());
  const double vs_ref = nmse(dec, rv);
  std::printf("  decode after %lld: vs own prefill NMSE %.3e, vs reference NMSE %.3e\n", (long long)pre, self, vs_ref);
  for (int64_t l = 0; l < c.n_layer_run(); ++l) {
    auto *rk = rt.get((int)l, op::kIndexerTopk), *gk = gt.get((int)l, op::kIndexerTopk);
    auto *ra = rt.get((int)l, op::kAttnLatentOut), *ga = gt.get((int)l, op::kAttnLatentOut);
    auto *rs = rt.get((int)l, op::kIndexerScores), *gs = gt.get((int)l, op::kIndexerScores);
    if (!(rk && gk && ra && ga && rs && gs)) continue;
    std::set<int32_t> a(rk->i.begin(), rk->i.end()), b(gk->i.begin(), gk->i.end());
    size_t inter = 0;
    for (auto v : a) inter += b.count(v);
    std::vector<double> rsf, gsf;
    for (size_t i = 0; i < rs->v.size(); ++i)
      if (std::isfinite(rs->v[i])) rsf.push_back(rs->v[i]), gsf.push_back(gs->v[i]);
    std::printf("  layer %lld: top-k Jaccard %.4f, scores NMSE %.3e, attn_latent_out NMSE %.3e\n", (long long)l,
                (double)inter / (a.size() + b.size() - inter), nmse_d(gsf, rsf), nmse_d(ga->v, ra->v));
  }
  EXPECT_LE(self, 1e-4) << "decode differs from the pipeline's own prefill";
  // Greedy by hand: argmax of the prefill, decode it, argmax again; on both sides.
  p.reset();
  auto lg = p.forward(std::span<const int32_t>(ids.data(), pre));
  ref::Model<double> rm2(f, c);
  auto rl = rm2.forward(std::span<const int32_t>(ids.data(), pre));
  auto amax = [&](const float* row) { return (int32_t)(std::max_element(row, row + V) - row); };
  const int32_t g0 = amax(lg.data() + lg.size() - V);
  int32_t r0 = 0;
  for (int64_t i = 1; i < V; ++i)
    if (rl(rl.rows() - 1, i) > rl(rl.rows() - 1, r0)) r0 = (int32_t)i;
  auto gd = p.forward(std::span<const int32_t>(&g0, 1));
  auto rd = rm2.forward(std::span<const int32_t>(&r0, 1));
  std::vector<double> rdv(rd.data(), rd.data() + rd.size());
  int32_t r1 = 0;
  for (int64_t i = 1; i < V; ++i)
    if (rdv[i] > rdv[r1]) r1 = (int32_t)i;
  EXPECT_EQ(amax(gd.data()), r1) << "greedy step 1 by hand";
  std::printf("  by hand: step0 cuda %d ref %d; step1 cuda %d ref %d; step1 logits NMSE %.3e\n", g0, r0, amax(gd.data()), r1,
              nmse(gd, rdv));
}
#endif

void bad_input_case() {
  MLACONF_REQUIRE_TINY_MODEL();
  auto f = GgufFile::open(tiny_model_path());
  auto c = ModelConfig::from_gguf(f);
  cuda::PipelineOptions o;
  o.max_ctx = 16;
  cuda::Pipeline p(f, c, o);
  std::vector<int32_t> bad = {1, (int32_t)c.n_vocab};
  EXPECT_THROW(p.forward(bad), InputError);
  std::vector<int32_t> many(17, 1);
  EXPECT_THROW(p.forward(many), InputError);
}

// The overflow check names the first op that produced inf/NaN (negative control: an injected inf).
void overflow_case() {
  MLACONF_REQUIRE_TINY_MODEL();
  auto f = GgufFile::open(tiny_model_path());
  auto c = ModelConfig::from_gguf(f);
  cuda::Pipeline p(f, c);
  auto ids = prompt_ids(5, c.n_vocab);
  auto clean = p.forward(ids);
  EXPECT_TRUE(all_finite(clean));
  p.reset();
  cuda::ScopedFault fault(cuda::Fault::InjectOverflow);
  try {
    p.forward(ids);
    ADD_FAILURE() << "an injected inf must raise OverflowError";
  } catch (const cuda::OverflowError& e) {
    const std::string m = e.what();
    std::printf("  %s\n", m.c_str());
    EXPECT_NE(m.find("layer 1 op 'q_a'"), std::string::npos) << m;
  }
}

const bool registered = [] {
#ifdef MLACONF_HAVE_REF_MODEL
  register_case("model", "model_layers(model=glm_dsa_tiny,T=12)", [] { layers_case(12); });
  register_case("model", "model_layers(model=glm_dsa_tiny,T=200)", [] { layers_case(200); });
  register_case("model", "model_decode(model=glm_dsa_tiny,prefill=40,steps=20)", [] { decode_case(); });
  // The tiny model's matrices are below gemv_mma_by_default's 1024 x 2048, so the default runs them on the
  // SIMT kernels; GLM-5's run on the tensor cores. Its 24 Q4_K and 3 Q6_K matrices pinned there:
  register_case("model", "model_decode(model=glm_dsa_tiny,prefill=40,steps=20,gemv=mma)", [] {
    decode_case(cuda::GemvKernel::Mma);
  });
  register_case("model", "model_decode_long(model=glm_dsa_tiny,prefill=200,steps=1)", [] { long_decode_case(200); });
  register_case("model", "model_greedy(model=glm_dsa_tiny,T=200,new=24)", [] { greedy_case(200, 24); });
  register_case("model", "model_negative_control(fault=dense_attention,T=200)", [] { dense_case(200, true); });
  register_case("model", "model_negative_control(fault=dense_attention,T=40)", [] { dense_case(40, false); });
#endif
  register_case("model", "model_bad_input(id=vocab|ctx_overflow)", bad_input_case);
  register_case("model", "model_overflow_check(fault=inject_overflow,layer=1,op=q_a)", overflow_case);
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
