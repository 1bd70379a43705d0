// suites/forcing: a backend made to follow decisions that DIFFER from its own must use them, in every
// layer kind and every kind of pass (issue 37, "tests with teeth": before this, forcing was tested only
// where the forced decisions equalled the run's own, so a pass that ignored them somewhere passed).
//
// The model: synthesized, 4 layers with indexer types F F S F (layer 2 reuses layer 1's selection),
// layer 0 dense, layers 1-3 MoE, top_k 8 under a 24-token prompt (rows 8.. have more keys than top_k).
// The forced decisions of a pass (per full indexer layer, per MoE layer) are built to differ from the
// run's own:
//   top-k row with more keys than top_k: the keys the run did NOT select first, then the smallest of its
//             own to fill top_k (decode rows: a key set disjoint from its own);
//   top-k row with <= top_k keys (own = every key): the first half of the keys only;
//   router ids: the n_expert_used smallest ids the run did not choose (disjoint).
// Greedy steps cannot know the run's own decisions before the pass, so they force the top_k oldest keys
// and the n_expert_used largest expert ids, and the check asserts afterwards that these differ from the
// run's own in every row.
//
// What is asserted, per pass, per layer:
//   - the trace records the backend's OWN decisions (layer 0 of the prefill: equal to the unforced run's;
//     every forced layer: not equal to the forced ones);
//   - attn_latent_out equals the reference op replay (tools/backend op_table.h) of sparse attention on the
//     pass's own q_absorbed and latent cache WITH THE FORCED top-k (a shared layer: its source layer's
//     forced top-k), row NMSE <= tol (reference f64: 1e-12; CUDA f16: 1e-4);
//   - the same replay with the run's own top-k differs from it by row NMSE >= 1e-3 (10x the CUDA bound,
//     1e9x the reference's) on enough rows: the check has teeth on this very data;
//   - MoE layers: expert_out equals the replay of the experts with the FORCED ids (and differs from the
//     replay with its own ids), and mlp_out equals the replay of the mixture of those expert outputs.
// The unforced run (own decisions) is made first on the same tokens; prefill and decode steps take their
// forced decisions from it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/argmax.h"
#include "core/decisions.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/trace.h"
#include "suites/common/case_registry.h"
#include "suites/common/mem_trace.h"
#include "suites/core/synth_files.h"
#include "tools/backend/backend.h"

namespace mlaconf::forcing_test {
namespace {

constexpr int64_t kPrompt = 24, kTopK = 8, kDecode = 2, kGreedy = 2;
constexpr double kTeeth = 1e-3;  // row NMSE by which the forced selection must change a row to count

using test::MemTrace;  // every record of one pass, by (layer, name)

// The synthesized model (suites/core/synth_files.h), written once per process.
struct Model {
  std::string path;
  GgufFile f;
  ModelConfig c;
};
const Model& model() {
  static const Model m = [] {
    const std::string& p = testing_synth::tiny_ffs_seed37();
    GgufFile f = GgufFile::open(p);
    ModelConfig c = ModelConfig::from_gguf(f);
    if (c.indexer_top_k != kTopK) throw std::runtime_error("the forcing model's top_k is not kTopK");
    return Model{p, std::move(f), std::move(c)};
  }();
  return m;
}

std::vector<int32_t> prompt() {
  std::vector<int32_t> ids(kPrompt);
  for (int64_t t = 0; t < kPrompt; ++t) ids[t] = static_cast<int32_t>((t * 97 + 13) % 1900);
  return ids;
}
const int32_t kDecodeTokens[kDecode] = {211, 1433};

// A top-k row (width top_k, ascending, -1 padded) that differs from `own` at position p.
std::vector<int32_t> other_topk_row(const int32_t* own, int64_t p, int64_t k) {
  std::vector<int32_t> row(k, -1);
  if (p + 1 <= k) {
    for (int64_t j = 0; j <= p / 2; ++j) row[j] = static_cast<int32_t>(j);
    return row;
  }
  std::set<int32_t> mine(own, own + k), pick;
  for (int32_t key = 0; key <= p && static_cast<int64_t>(pick.size()) < k; ++key)
    if (!mine.count(key)) pick.insert(key);
  for (int32_t key : mine)
    if (static_cast<int64_t>(pick.size()) < k) pick.insert(key);
  std::copy(pick.begin(), pick.end(), row.begin());
  return row;
}
// The greedy steps' fixed rule: the top_k oldest keys (or the first half when there are no more).
std::vector<int32_t> oldest_topk_row(int64_t p, int64_t k) {
  std::vector<int32_t> row(k, -1);
  const int64_t n = p + 1 <= k ? p / 2 + 1 : k;
  for (int64_t j = 0; j < n; ++j) row[j] = static_cast<int32_t>(j);
  return row;
}
std::vector<int32_t> other_expert_row(const int32_t* own, int64_t K, int64_t n_expert) {
  std::set<int32_t> mine(own, own + K);
  std::vector<int32_t> row;
  for (int32_t e = 0; e < n_expert && static_cast<int64_t>(row.size()) < K; ++e)
    if (!mine.count(e)) row.push_back(e);
  return row;
}

// Decisions for a pass of T rows at pos0 that differ from those `own` recorded (nullptr: greedy's rule).
ForcedDecisions differing(const ModelConfig& c, const MemTrace* own, int64_t T, int64_t pos0) {
  ForcedDecisions d;
  const int64_t K = c.n_expert_used;
  for (int64_t l = 0; l < c.n_layer_run(); ++l) {
    if (c.is_full_indexer_layer(l)) {
      auto& v = d.topk[static_cast<int>(l)];
      for (int64_t t = 0; t < T; ++t) {
        const auto row = own ? other_topk_row(own->at(static_cast<int>(l), op::kIndexerTopk).i.data() + t * kTopK, pos0 + t, kTopK)
                             : oldest_topk_row(pos0 + t, kTopK);
        v.insert(v.end(), row.begin(), row.end());
      }
    }
    if (c.is_moe_layer(l)) {
      auto& v = d.experts[static_cast<int>(l)];
      for (int64_t t = 0; t < T; ++t) {
        if (own) {
          const auto row = other_expert_row(own->at(static_cast<int>(l), op::kRouterIds).i.data() + t * K, K, c.n_expert);
          v.insert(v.end(), row.begin(), row.end());
        } else {
          for (int64_t j = 0; j < K; ++j) v.push_back(static_cast<int32_t>(c.n_expert - K + j));
        }
      }
    }
  }
  return d;
}

be::HostTensor host(const MemTrace::Rec& r) {
  be::HostTensor h;
  h.shape = r.shape;
  if (!r.v.empty()) h.v = r.v;
  else h.v.assign(r.i.begin(), r.i.end());
  return h;
}
be::HostTensor host_i32(const int32_t* d, std::vector<int64_t> shape) {
  be::HostTensor h;
  h.shape = std::move(shape);
  h.v.assign(d, d + MemTrace::count(h.shape));
  return h;
}

// Row t's NMSE of `got` against `want` ([rows, n] row-major).
double row_nmse(const std::vector<double>& got, const std::vector<double>& want, int64_t t, int64_t n) {
  double e = 0, s = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double w = want[t * n + j], d = got[t * n + j] - w;
    e += d * d;
    s += w * w;
  }
  return s > 0 ? e / s : (e > 0 ? INFINITY : 0.0);
}
bool same_set(const int32_t* a, const int32_t* b, int64_t k) {
  std::set<int32_t> x(a, a + k), y(b, b + k);
  x.erase(-1);
  y.erase(-1);
  return x == y;
}

struct Pass {
  std::string kind;  // prefill | decode | greedy
  int64_t pos0 = 0, T = 0;
  MemTrace tr;
  ForcedDecisions forced;
  std::map<int, std::vector<double>> cache;  // layer -> the latent cache after the pass [pos0 + T, dlat]
};

struct Run {
  std::string skip;  // "not supported: ..." when the backend cannot run here
  std::vector<Pass> passes;    // the forced runs' passes: prefill, decode steps, then prefill, greedy steps
  MemTrace unforced_prefill;
};

std::unique_ptr<be::Backend> open_backend(const std::string& name) {
  const Model& m = model();
  be::BackendOptions o;
  o.precision = "f64";
  return be::make_backend(name, m.f, m.c, o);
}

// Runs a pass, accumulating each layer's latent cache rows.
void run_pass(be::Backend& b, Pass& p, std::span<const int32_t> ids, const std::map<int, std::vector<double>>& before,
              std::vector<double>* logits) {
  const ModelConfig& c = model().c;
  p.pos0 = b.n_past();
  p.T = static_cast<int64_t>(ids.size());
  auto out = b.forward(ids, &p.tr, &p.forced);
  if (logits) *logits = out;
  for (int l = 0; l < c.n_layer_run(); ++l) {
    auto v = before.count(l) ? before.at(l) : std::vector<double>{};
    const auto& rows = p.tr.at(l, op::kLatentCache).v;
    v.insert(v.end(), rows.begin(), rows.end());
    p.cache[l] = std::move(v);
  }
}

const Run& run_of(const std::string& backend) {
  static std::map<std::string, Run> runs;
  if (auto it = runs.find(backend); it != runs.end()) return it->second;
  Run& r = runs[backend];
  std::unique_ptr<be::Backend> b;
  try {
    b = open_backend(backend);
  } catch (const NotSupported& e) {
    r.skip = std::string("not supported: ") + e.what();
    return r;
  }
  const ModelConfig& c = model().c;
  const auto ids = prompt();
  // The unforced run: its own decisions for the prefill and each decode step.
  MemTrace own_dec[kDecode];
  b->forward(ids, &r.unforced_prefill);
  for (int s = 0; s < kDecode; ++s) b->forward(std::span<const int32_t>(&kDecodeTokens[s], 1), &own_dec[s]);
  // Forced run 1: the prefill and the decode steps, each on decisions other than its own.
  b->reset();
  std::map<int, std::vector<double>> cache;
  Pass pre;
  pre.kind = "prefill";
  pre.forced = differing(c, &r.unforced_prefill, kPrompt, 0);
  run_pass(*b, pre, ids, cache, nullptr);
  cache = pre.cache;
  r.passes.push_back(std::move(pre));
  for (int s = 0; s < kDecode; ++s) {
    Pass d;
    d.kind = "decode";
    d.forced = differing(c, &own_dec[s], 1, kPrompt + s);
    run_pass(*b, d, std::span<const int32_t>(&kDecodeTokens[s], 1), cache, nullptr);
    cache = d.cache;
    r.passes.push_back(std::move(d));
  }
  // Forced run 2: the prefill again (same forced decisions), then greedy steps on the fixed rule.
  b->reset();
  Pass pre2;
  pre2.kind = "prefill";
  pre2.forced = r.passes.front().forced;
  std::vector<double> logits;
  run_pass(*b, pre2, ids, {}, &logits);
  cache = pre2.cache;
  r.passes.push_back(std::move(pre2));
  for (int s = 0; s < kGreedy; ++s) {
    const int32_t tok = argmax_lower(logits);
    Pass g;
    g.kind = "greedy";
    g.forced = differing(c, nullptr, 1, b->n_past());
    run_pass(*b, g, std::span<const int32_t>(&tok, 1), cache, &logits);
    cache = g.cache;
    r.passes.push_back(std::move(g));
  }
  return r;
}

be::Backend& replay_backend() {
  static std::unique_ptr<be::Backend> b = open_backend("reference");
  return *b;
}

double tol_of(const std::string& backend) { return backend == "reference" ? 1e-12 : 1e-4; }

// Attention of every layer (full and shared) follows the forced top-k of its source layer.
void check_attention(const std::string& backend, const Pass& p, int64_t pass_no) {
  const ModelConfig& c = model().c;
  const int64_t H = c.n_head, dl = c.kv_lora_rank, dlat = c.latent_dim(), T = p.T;
  const double tol = tol_of(backend);
  for (int l = 0; l < c.n_layer_run(); ++l) {
    const int src = static_cast<int>(c.indexer_source_layer(l));
    const std::vector<int32_t>& forced = p.forced.topk.at(src);
    const auto& own = p.tr.at(l, op::kIndexerTopk).i;
    const std::string where = p.kind + " pass " + std::to_string(pass_no) + " (pos0 " + std::to_string(p.pos0) +
                              ") layer " + std::to_string(l) + (src == l ? " (full indexer)" : " (shares layer " + std::to_string(src) + "'s)");
    be::Tensors in;
    in["q_absorbed"] = host(p.tr.at(l, op::kQAbsorbed));
    in["latent_cache"] = be::HostTensor{{p.pos0 + T, dlat}, p.cache.at(l)};
    in["indexer_topk"] = host_i32(forced.data(), {T, kTopK});
    const auto want = replay_backend().replay(l, "attn_latent_out", in, p.pos0).at("attn_latent_out").v;
    in["indexer_topk"] = host_i32(own.data(), {T, kTopK});
    const auto alt = replay_backend().replay(l, "attn_latent_out", in, p.pos0).at("attn_latent_out").v;
    const auto& got = p.tr.at(l, op::kAttnLatentOut).v;
    ASSERT_EQ(got.size(), want.size()) << where;
    int64_t differ = 0, teeth = 0;
    for (int64_t t = 0; t < T; ++t) {
      const bool same = same_set(forced.data() + t * kTopK, own.data() + t * kTopK, kTopK);
      differ += !same;
      const double e = row_nmse(got, want, t, H * dl), sep = row_nmse(alt, want, t, H * dl);
      teeth += !same && sep >= kTeeth;
      EXPECT_LE(e, tol) << where << " row " << t << ": attn_latent_out is not the attention over the FORCED top-k (row NMSE "
                        << e << " against the replay with the forced keys; " << row_nmse(got, alt, t, H * dl)
                        << " against the replay with its own keys)";
    }
    // Rows whose own selection is every key (pos < top_k) are forced to the first half: all differ but row 0.
    // Layer 0 sees the unforced run's inputs, so its own selection differs from the forced one on every such
    // row; later layers' own selections follow the changed inputs and may happen to meet the forced set on a
    // row with few candidate sets (row 8: 9 keys, 9 sets of 8).
    const int64_t want_differ = T - (p.pos0 == 0 ? 1 : 0);
    if (l == 0) EXPECT_EQ(differ, want_differ) << where << ": rows whose recorded (own) top-k differs from the forced one";
    else EXPECT_GE(4 * differ, 3 * want_differ) << where << ": rows whose recorded (own) top-k differs from the forced one";
    EXPECT_GE(teeth, std::max<int64_t>(1, want_differ / 2))
        << where << ": rows where the forced selection moves the output by row NMSE >= " << kTeeth;
  }
}

// MoE layers' experts and mixture follow the forced router ids.
void check_experts(const std::string& backend, const Pass& p, int64_t pass_no) {
  const ModelConfig& c = model().c;
  const int64_t T = p.T, K = c.n_expert_used, E = c.n_embd;
  const double tol = tol_of(backend);
  for (int l = 0; l < c.n_layer_run(); ++l) {
    if (!c.is_moe_layer(l)) continue;
    const std::string where = p.kind + " pass " + std::to_string(pass_no) + " layer " + std::to_string(l);
    const std::vector<int32_t>& forced = p.forced.experts.at(l);
    const auto& own = p.tr.at(l, op::kRouterIds).i;
    be::Tensors in;
    in["ffn_norm_out"] = host(p.tr.at(l, op::kFfnNormOut));
    in["router_ids"] = host_i32(forced.data(), {T, K});
    const auto want = replay_backend().replay(l, "expert_out", in, p.pos0).at("expert_out");
    in["router_ids"] = host_i32(own.data(), {T, K});
    const auto alt = replay_backend().replay(l, "expert_out", in, p.pos0).at("expert_out").v;
    const auto& got = p.tr.at(l, op::kExpertOut).v;
    ASSERT_EQ(got.size(), want.v.size()) << where;
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_FALSE(same_set(forced.data() + t * K, own.data() + t * K, K))
          << where << " row " << t << ": the recorded router_ids are the forced ones, not the backend's own";
      const double e = row_nmse(got, want.v, t, K * E), sep = row_nmse(alt, want.v, t, K * E);
      EXPECT_LE(e, tol) << where << " row " << t << ": expert_out is not that of the FORCED experts (row NMSE " << e
                        << "; " << row_nmse(got, alt, t, K * E) << " against its own experts')";
      EXPECT_GE(sep, kTeeth) << where << " row " << t << ": forced and own experts give the same output";
    }
    be::Tensors mix;
    mix["expert_out"] = want;
    mix["router_weights"] = host(p.tr.at(l, op::kRouterWeights));
    mix["shared_expert_out"] = host(p.tr.at(l, op::kSharedExpertOut));
    const auto want_mlp = replay_backend().replay(l, "mlp_out", mix, p.pos0).at("mlp_out").v;
    const auto& got_mlp = p.tr.at(l, op::kMlpOut).v;
    for (int64_t t = 0; t < T; ++t)
      EXPECT_LE(row_nmse(got_mlp, want_mlp, t, E), tol) << where << " row " << t << ": mlp_out is not the mixture of the FORCED experts";
  }
}

void check(const std::string& backend, const std::string& kind) {
  const Run& r = run_of(backend);
  if (!r.skip.empty()) GTEST_SKIP() << r.skip;
  int64_t n = 0;
  for (size_t i = 0; i < r.passes.size(); ++i) {
    const Pass& p = r.passes[i];
    if (p.kind != kind) continue;
    ++n;
    check_attention(backend, p, static_cast<int64_t>(i));
    check_experts(backend, p, static_cast<int64_t>(i));
    if (kind == "prefill") {
      // Layer 0's inputs do not depend on any decision: its recorded top-k and router ids (layer 0 is dense:
      // top-k only) are exactly the unforced run's, the backend's own.
      EXPECT_EQ(p.tr.at(0, op::kIndexerTopk).i, r.unforced_prefill.at(0, op::kIndexerTopk).i)
          << "prefill layer 0: the recorded indexer_topk is not the backend's own";
    }
  }
  EXPECT_EQ(n, kind == "prefill" ? 2 : kind == "decode" ? kDecode : kGreedy) << "passes of kind " << kind;
}

const bool registered = [] {
  for (const char* backend : {"reference", "cuda"})
    for (const char* kind : {"prefill", "decode", "greedy"})
      test::register_case("Forcing", test::CaseName("forced_differs").p("backend", backend).p("pass", kind).p("indexer", "FFS").str(),
                          [backend = std::string(backend), kind = std::string(kind)] { check(backend, kind); });
  return true;
}();

}  // namespace
}  // namespace mlaconf::forcing_test
