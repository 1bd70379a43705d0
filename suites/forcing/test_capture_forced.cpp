// suites/forcing: `capture --force-decisions FIXTURE` hands each pass the decisions FIXTURE holds for it
// (tools/backend/forced_source.h: the forward case's for the prefill, decode case s's for decode step s,
// row s of the greedy case's step_* for greedy step s), when those decisions DIFFER from the run's own.
//
// E = a capture of a synthesized model (4 layers, indexer types F F S F, top_k 8, 24 tokens, 2 decode
// steps, 3 greedy steps). E2 = E with every decision replaced by another valid one (the top-k rows: keys
// the run did not select first, or the first half of the keys; the router ids: experts it did not choose).
// F = the capture forced by E2. The same model is then run in this process through the Backend interface,
// pass by pass, with E2's decisions given directly (Backend::forward's `forced`, which Forcing.forced_differs
// shows is followed): F's attention, expert and layer outputs of the prefill and the decode steps, and its
// greedy step logits, must equal that run's (row NMSE <= 1e-10: F stores f32; CUDA against itself: 1e-6), and differ from E's (the
// unforced capture) by far more. F's recorded decisions are its own (layer 0 of the prefill: E's).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/decisions.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/trace.h"
#include "fixtures/fixture_file.h"
#include "suites/common/case_registry.h"
#include "suites/common/mem_trace.h"
#include "suites/core/gguf_bytes.h"
#include "suites/core/synth_files.h"
#include "tools/backend/backend.h"

namespace mlaconf::capture_forced_test {
namespace {

using fx::Array;

constexpr int64_t kK = 8;

int sh(const std::string& cmd) {
  const int st = std::system((cmd + " >/dev/null 2>&1").c_str());
  return st == -1 ? -1 : WEXITSTATUS(st);
}

using test::MemTrace;

std::vector<double> other_topk_row(const double* own, int64_t p) {
  std::vector<double> row(kK, -1);
  if (p + 1 <= kK) {
    for (int64_t j = 0; j <= p / 2; ++j) row[j] = static_cast<double>(j);
    return row;
  }
  std::set<int64_t> mine, pick;
  for (int64_t j = 0; j < kK; ++j)
    if (own[j] >= 0) mine.insert(static_cast<int64_t>(own[j]));
  for (int64_t key = 0; key <= p && static_cast<int64_t>(pick.size()) < kK; ++key)
    if (!mine.count(key)) pick.insert(key);
  for (int64_t key : mine)
    if (static_cast<int64_t>(pick.size()) < kK) pick.insert(key);
  int64_t j = 0;
  for (int64_t key : pick) row[j++] = static_cast<double>(key);
  return row;
}
std::vector<double> other_experts(const double* own, int64_t U, int64_t n_expert) {
  std::set<int64_t> mine;
  for (int64_t j = 0; j < U; ++j) mine.insert(static_cast<int64_t>(own[j]));
  std::vector<double> row;
  for (int64_t e = 0; e < n_expert && static_cast<int64_t>(row.size()) < U; ++e)
    if (!mine.count(e)) row.push_back(static_cast<double>(e));
  return row;
}

// E with every decision replaced (see the file comment). Shared layers get their source layer's new rows.
fx::FixtureData altered(const fx::FixtureFile& E, const ModelConfig& c) {
  fx::FixtureData fd;
  for (const auto& [k, v] : E.root_attrs()) {
    if (k == "cases" || k == "schema_version" || k == "producer") continue;
    if (v.is_string) fd.attrs[k] = v.s;
    else fd.int_attrs[k] = static_cast<int64_t>(v.d);
  }
  const int nl = static_cast<int>(c.n_layer_run());
  for (const std::string& cs : E.cases()) {
    fx::CaseData cd;
    cd.name = cs;
    for (const auto& [k, v] : E.case_attrs(cs)) {
      if (v.is_string) cd.attrs[k] = v.s;
      else cd.int_attrs[k] = static_cast<int64_t>(v.d);
    }
    for (const std::string& p : E.case_datasets(cs)) cd.datasets[p] = E.read(cs, p);
    for (int l = 0; l < nl; ++l) cd.layer_moe[l] = c.is_moe_layer(l) ? 1 : 0;
    const int64_t pos0 = cd.int_attrs.count("pos0") ? cd.int_attrs["pos0"] : 0;
    if (E.case_kind(cs) == "greedy") {
      Array& tk = cd.datasets.at("step_indexer_topk");  // [n, layers, K]; step s's row at position T + s - 1
      const int64_t T = cd.datasets.at("input_ids").size();
      for (int64_t s = 0; s < tk.shape[0]; ++s)
        for (int l = 0; l < nl; ++l) {
          const int src = static_cast<int>(c.indexer_source_layer(l));
          const auto row = other_topk_row(&E.read(cs, "step_indexer_topk").v[(s * nl + src) * kK], T + s - 1);
          std::copy(row.begin(), row.end(), tk.v.begin() + (s * nl + l) * kK);
        }
      Array& ri = cd.datasets.at("step_router_ids");  // [n, MoE layers, U]
      const int64_t U = ri.shape[2];
      for (int64_t i = 0; i < ri.shape[0] * ri.shape[1]; ++i) {
        const auto row = other_experts(&ri.v[i * U], U, c.n_expert);
        std::copy(row.begin(), row.end(), ri.v.begin() + i * U);
      }
    } else {
      for (int l = 0; l < nl; ++l) {
        const int src = static_cast<int>(c.indexer_source_layer(l));
        const Array own = E.read(cs, "layers/" + std::to_string(src) + "/indexer_topk");
        Array& tk = cd.datasets.at("layers/" + std::to_string(l) + "/indexer_topk");
        for (int64_t t = 0; t < tk.shape[0]; ++t) {
          const auto row = other_topk_row(&own.v[t * kK], pos0 + t);
          std::copy(row.begin(), row.end(), tk.v.begin() + t * kK);
        }
        if (c.is_moe_layer(l)) {
          Array& ri = cd.datasets.at("layers/" + std::to_string(l) + "/router_ids");
          const int64_t U = ri.shape[1];
          for (int64_t t = 0; t < ri.shape[0]; ++t) {
            const auto row = other_experts(&ri.v[t * U], U, c.n_expert);
            std::copy(row.begin(), row.end(), ri.v.begin() + t * U);
          }
        }
      }
    }
    fd.cases.push_back(std::move(cd));
  }
  return fd;
}

std::vector<int32_t> ints(const std::vector<double>& v, size_t off, size_t n) {
  std::vector<int32_t> o;
  for (size_t i = 0; i < n; ++i) o.push_back(static_cast<int32_t>(v[off + i]));
  return o;
}
// A forward or decode case's decisions as ForcedDecisions (full indexer layers, MoE layers).
ForcedDecisions decisions_of(const fx::FixtureFile& f, const std::string& cs, const ModelConfig& c) {
  ForcedDecisions d;
  for (int l = 0; l < c.n_layer_run(); ++l) {
    const std::string pre = "layers/" + std::to_string(l) + "/";
    if (c.is_full_indexer_layer(l)) {
      const Array a = f.read(cs, pre + "indexer_topk");
      d.topk[l] = ints(a.v, 0, a.v.size());
    }
    if (c.is_moe_layer(l)) {
      const Array a = f.read(cs, pre + "router_ids");
      d.experts[l] = ints(a.v, 0, a.v.size());
    }
  }
  return d;
}
ForcedDecisions greedy_decisions(const fx::FixtureFile& f, const std::string& cs, const ModelConfig& c, int64_t s) {
  ForcedDecisions d;
  const int nl = static_cast<int>(c.n_layer_run());
  const Array tk = f.read(cs, "step_indexer_topk"), ri = f.read(cs, "step_router_ids");
  const int64_t U = ri.shape[2];
  int moe = 0;
  for (int l = 0; l < nl; ++l) {
    if (c.is_full_indexer_layer(l)) d.topk[l] = ints(tk.v, (s * nl + l) * kK, kK);
    if (c.is_moe_layer(l)) d.experts[l] = ints(ri.v, (s * ri.shape[1] + moe++) * U, U);
  }
  return d;
}

double worst_row_nmse(const std::vector<double>& got, const std::vector<double>& want, int64_t rows) {
  const int64_t n = static_cast<int64_t>(want.size()) / rows;
  double w = 0;
  for (int64_t t = 0; t < rows; ++t) {
    double e = 0, s = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double d = got[t * n + j] - want[t * n + j];
      e += d * d;
      s += want[t * n + j] * want[t * n + j];
    }
    w = std::max(w, s > 0 ? e / s : (e > 0 ? INFINITY : 0.0));
  }
  return w;
}

void capture_follows_forced(const std::string& backend) {
  const std::string d = testing_gguf::scratch_dir("capture-forced-" + backend);
  // Environment MLACONF_CLI (a binary carried to a GPU machine), else the one built beside this test.
  const char* env = std::getenv("MLACONF_CLI");
  const std::string cli = env ? env : MLACONF_CLI, m = testing_synth::tiny_ffs_seed37();
  GgufFile gf = GgufFile::open(m);
  const ModelConfig c = ModelConfig::from_gguf(gf);
  ASSERT_EQ(c.indexer_top_k, kK);
  be::BackendOptions o;
  o.precision = "f64";
  std::unique_ptr<be::Backend> b;
  try {
    b = be::make_backend(backend, gf, c, o);
  } catch (const NotSupported& e) {
    GTEST_SKIP() << "not supported: " << e.what();
  }
  // The CUDA pipeline against itself: the same kernels on the same inputs, so far below its f16 bounds.
  const double tol = backend == "reference" ? 1e-10 : 1e-6;
  const std::string cap = cli + " capture --quiet --model " + m + " --random-tokens 24 --seed 2 --decode-steps 2 --generate 3" +
                          (backend == "reference" ? " --precision f64" : " --backend cuda");
  ASSERT_EQ(sh(cap + " --out " + d + "/e.h5"), 0);
  {
    fx::FixtureFile E(d + "/e.h5");
    fx::write_fixture(d + "/e2.h5", altered(E, c));
  }
  ASSERT_EQ(sh(cap + " --force-decisions " + d + "/e2.h5 --out " + d + "/f.h5"), 0);
  fx::FixtureFile E(d + "/e.h5"), E2(d + "/e2.h5"), F(d + "/f.h5");
  const int nl = static_cast<int>(c.n_layer_run());
  const char* outs[] = {"attn_latent_out", "attn_out", "expert_out", "mlp_out", "output_hidden"};
  int64_t checked = 0;
  auto check_case = [&](const std::string& cs, const MemTrace& tr, int64_t T) {
    const auto at = F.case_attrs(cs);
    EXPECT_EQ(at.count("forced_decisions") ? at.at("forced_decisions").d : -1, 1) << cs << ": F's case says it was forced";
    for (int l = 0; l < nl; ++l)
      for (const char* n : outs) {
        const std::string p = "layers/" + std::to_string(l) + "/" + n;
        if (!F.has(cs, p)) continue;
        const MemTrace::Rec* rec = tr.get(l, n);
        ASSERT_NE(rec, nullptr) << p;
        const Array got = F.read(cs, p), unforced = E.read(cs, p);
        const double e = worst_row_nmse(got.v, rec->v, T), sep = worst_row_nmse(unforced.v, rec->v, T);
        EXPECT_LE(e, tol) << cs << " " << p << ": the forced capture is not the run on E2's decisions (worst row NMSE " << e << ")";
        EXPECT_GE(sep, 1e-3) << cs << " " << p << ": E2's decisions do not change it (worst row NMSE against E " << sep << ")";
        ++checked;
      }
  };
  // Prefill and decode steps, tokens as E2 (= E) feeds them.
  std::vector<std::string> dec;
  std::string fwd, greedy;
  for (const std::string& cs : E2.cases()) {
    const std::string k = E2.case_kind(cs);
    if (k == "full_forward") fwd = cs;
    else if (k == "decode_step") dec.push_back(cs);
    else if (k == "greedy") greedy = cs;
  }
  ASSERT_FALSE(fwd.empty());
  ASSERT_EQ(dec.size(), 2u);
  ASSERT_FALSE(greedy.empty());
  auto ids_of = [&](const std::string& cs) {
    const Array a = E2.read(cs, "input_ids");
    return ints(a.v, 0, a.v.size());
  };
  const auto prompt = ids_of(fwd);
  {
    MemTrace tr;
    const ForcedDecisions fd = decisions_of(E2, fwd, c);
    b->forward(prompt, &tr, &fd);
    check_case(fwd, tr, static_cast<int64_t>(prompt.size()));
    // Its recorded decisions are its own: layer 0's (inputs independent of any decision) are E's.
    EXPECT_EQ(F.read(fwd, "layers/0/indexer_topk").v, E.read(fwd, "layers/0/indexer_topk").v) << "F records its own top-k";
    EXPECT_NE(F.read(fwd, "layers/0/indexer_topk").v, E2.read(fwd, "layers/0/indexer_topk").v);
  }
  for (const std::string& cs : dec) {
    MemTrace tr;
    const ForcedDecisions fd = decisions_of(E2, cs, c);
    b->forward(ids_of(cs), &tr, &fd);
    check_case(cs, tr, 1);
  }
  // Greedy: the prefill on the forward case's decisions, then step s on row s of step_*, fed E2's tokens.
  b->reset();
  const ForcedDecisions pre = decisions_of(E2, fwd, c);
  std::vector<double> logits = b->forward(prompt, nullptr, &pre);
  const Array toks = E2.read(greedy, "tokens"), got = F.read(greedy, "step_logits"), unforced = E.read(greedy, "step_logits");
  const int64_t V = got.shape[1], N = got.shape[0];
  for (int64_t s = 0; s < N; ++s) {
    if (s > 0) {
      const ForcedDecisions fd = greedy_decisions(E2, greedy, c, s);
      const int32_t t = static_cast<int32_t>(toks.v[s - 1]);
      logits = b->forward(std::span<const int32_t>(&t, 1), nullptr, &fd);
    }
    const std::vector<double> g(got.v.begin() + s * V, got.v.begin() + (s + 1) * V), u(unforced.v.begin() + s * V, unforced.v.begin() + (s + 1) * V);
    const double e = worst_row_nmse(g, logits, 1), sep = worst_row_nmse(u, logits, 1);
    EXPECT_LE(e, tol) << greedy << " step " << s << ": step_logits are not those of the run on E2's decisions (NMSE " << e << ")";
    EXPECT_GE(sep, 1e-3) << greedy << " step " << s << ": E2's decisions do not change the logits (NMSE against E " << sep << ")";
    ++checked;
  }
  EXPECT_GE(checked, 3 * 4 * 4 + 3) << "datasets checked";
  std::printf("  %lld datasets / steps checked\n", static_cast<long long>(checked));
}

const bool registered = [] {
  for (const char* backend : {"reference", "cuda"})
    test::register_case("Forcing",
                        test::CaseName("capture_force_decisions_differ").p("backend", backend).p("model", "synth_FFS_topk8")
                            .p("tokens", 24).p("decode", 2).p("greedy", 3).str(),
                        [backend = std::string(backend)] { capture_follows_forced(backend); });
  return true;
}();

}  // namespace
}  // namespace mlaconf::capture_forced_test
