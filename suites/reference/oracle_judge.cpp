// suites/reference: the reference on an oracle case, judged by fixtures' judge (see oracle_judge.h).
#include "suites/reference/oracle_judge.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/argmax.h"
#include "fixtures/fixture_file.h"
#include "reference/model.h"
#include "suites/reference/judge_arrays.h"

namespace mlaconf::test {
namespace {

template <class S>
const char* precision_name() {
  return sizeof(S) == 8 ? "f64" : "f32";
}

fx::Array ids_array(const std::vector<int32_t>& ids) {
  return fx::Array{fx::Dtype::I32, {static_cast<int64_t>(ids.size())}, {ids.begin(), ids.end()}};
}

// The last row of record `i` of (layer, name), appended to `out`.
void append_last_row(const Capture& cap, int layer, const char* name, size_t i, std::vector<double>& out) {
  const auto* rs = cap.get(layer, name);
  if (!rs || rs->size() <= i) throw std::runtime_error(std::string(name) + " not recorded for layer " + std::to_string(layer));
  const fx::Array a = array_of((*rs)[i]);
  const int64_t w = a.shape.empty() || a.shape[0] == 0 ? 0 : a.size() / a.shape[0];
  out.insert(out.end(), a.v.end() - w, a.v.end());
}

// A full forward: every record, at its path in a case group ("layers/2/attn_out", "logits").
fx::CaseData forward_case(const Capture& cap, const std::vector<int32_t>& ids, const std::string& precision) {
  fx::CaseData d;
  d.name = "reference";
  d.attrs[fx::attr::kKind] = "full_forward";
  d.attrs[fx::attr::kPrecision] = precision;
  d.datasets["input_ids"] = ids_array(ids);
  for (const auto& [key, recs] : cap.recs) {
    const std::string path = key.first < 0 ? key.second : "layers/" + std::to_string(key.first) + "/" + key.second;
    d.datasets[path] = array_of(recs.back());
  }
  return d;
}

// A greedy run in the oracle's layout: tokens, margins, step_logits [n, V], step_indexer_topk
// [n, L, K] over the layers the oracle holds, step_router_ids / step_router_weights [n, L_moe, U].
fx::CaseData greedy_case(const Capture& cap, const ref::GenerateResult& g, const ModelConfig& c, const std::vector<int32_t>& ids,
                         int64_t idx_layers, const std::string& precision) {
  const int64_t n = static_cast<int64_t>(g.tokens.size());
  fx::CaseData d;
  d.name = "reference";
  d.attrs[fx::attr::kKind] = "greedy";
  d.attrs[fx::attr::kPrecision] = precision;
  d.datasets["input_ids"] = ids_array(ids);
  d.datasets["tokens"] = ids_array(g.tokens);
  d.datasets["margins"] = fx::Array{fx::Dtype::F64, {n}, g.margins};
  std::vector<double> logits, topk, rid, rw;
  std::vector<int64_t> moe;
  for (int64_t l = 0; l < c.n_layer_run(); ++l)
    if (c.is_moe_layer(l)) moe.push_back(l);
  for (int64_t i = 0; i < n; ++i) {
    const size_t s = static_cast<size_t>(i);
    append_last_row(cap, -1, op::kLogits, s, logits);
    for (int64_t l = 0; l < idx_layers; ++l) append_last_row(cap, static_cast<int>(l), op::kIndexerTopk, s, topk);
    for (int64_t l : moe) {
      append_last_row(cap, static_cast<int>(l), op::kRouterIds, s, rid);
      append_last_row(cap, static_cast<int>(l), op::kRouterWeights, s, rw);
    }
  }
  d.datasets["step_logits"] = fx::Array{fx::Dtype::F64, {n, c.n_vocab}, logits};
  const int64_t K = n && idx_layers ? static_cast<int64_t>(topk.size()) / (n * idx_layers) : 0;
  d.datasets["step_indexer_topk"] = fx::Array{fx::Dtype::I32, {n, idx_layers, K}, topk};
  if (!moe.empty()) {
    const int64_t U = static_cast<int64_t>(rid.size()) / (n * static_cast<int64_t>(moe.size()));
    d.datasets["step_router_ids"] = fx::Array{fx::Dtype::I32, {n, static_cast<int64_t>(moe.size()), U}, rid};
    d.datasets["step_router_weights"] = fx::Array{fx::Dtype::F64, {n, static_cast<int64_t>(moe.size()), U}, rw};
  }
  return d;
}

double max_abs_finite(const fx::Array& a) {
  double m = 0;
  for (double x : a.v)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

// The dataset a difference dataset is a difference of, in the same folder: gaps of scores or router
// weights, margins of the step logits.
std::string source_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string op = slash == std::string::npos ? path : path.substr(slash + 1);
  if (op == "indexer_topk_gap") return dir + "indexer_scores";
  if (op == "router_topk_gap") return dir + "router_weights";
  if (op == "margins") return dir + "step_logits";
  return "";
}

// Differences (gaps, margins) against the bound of their source's class (see oracle_judge.h).
// Returns, per op, the worst |a - e| / max |expected source| seen.
std::map<std::string, double> check_differences(const fx::CompareReport& rep, const fx::FixtureFile& E, const std::string& cas,
                                                const std::string& precision) {
  std::map<std::string, double> worst;
  for (const auto& r : rep.results) {
    const std::string src = source_of(r.path);
    if (src.empty() || r.verdict != fx::Verdict::Info) continue;
    const double bound = fx::tolerance(fx::tol_class_of(src.substr(src.rfind('/') + 1)), precision).max_rel;
    const double scale = E.has(cas, src) ? max_abs_finite(E.read(cas, src)) : 1.0;
    const double rel = scale > 0 ? r.max_abs / scale : r.max_abs;
    worst[r.op] = std::max(worst[r.op], rel);
    EXPECT_EQ(r.nonfinite_mismatch, 0) << cas << " " << r.path << ": NaN / inf where the oracle has none, or the reverse";
    EXPECT_LE(rel, bound) << cas << " " << r.path << ": |a - e| / max |" << src << "| (the " << src << " class's max_rel at "
                          << precision << ")";
  }
  return worst;
}

// EXPECTs the verdict and prints the worst metrics per op and the decisions' counts.
void report(const fx::CompareReport& rep, const std::map<std::string, double>& diffs, const std::string& title) {
  EXPECT_TRUE(rep.pass()) << fx::report_table(rep, true);
  struct Worst {
    double nmse = 0, max_rel = 0, one_minus_cos = 0;
  };
  std::map<std::string, Worst> w;
  int64_t rows = 0, differ = 0, near_tie = 0, near_tie_differ = 0;
  for (const auto& r : rep.results) {
    if (r.cls == fx::TolClass::IndexSet || r.cls == fx::TolClass::ExactIds) {
      rows += r.rows;
      differ += r.rows - r.rows_equal;
      near_tie += r.rows_flagged;
      near_tie_differ += r.rows_flagged_differ;
    } else if (r.verdict == fx::Verdict::Pass || r.verdict == fx::Verdict::Fail) {
      Worst& x = w[r.op];
      x.nmse = std::max(x.nmse, r.nmse);
      x.max_rel = std::max(x.max_rel, r.max_rel);
      x.one_minus_cos = std::max(x.one_minus_cos, 1 - r.cosine);
    }
  }
  std::printf("[ judge ] %s: %s (%d failing datasets)\n", title.c_str(), rep.pass() ? "pass" : "FAIL", rep.failures());
  std::printf("[ judge ]   %-24s %10s %10s %10s\n", "op (worst)", "nmse", "max_rel", "1-cosine");
  for (const auto& [op, x] : w) std::printf("[ judge ]   %-24s %10.3e %10.3e %10.3e\n", op.c_str(), x.nmse, x.max_rel, x.one_minus_cos);
  for (const auto& [op, x] : diffs) std::printf("[ judge ]   %-24s |a-e|/scale %.3e\n", op.c_str(), x);
  std::printf("[ judge ]   decisions: %lld rows, %lld differ (%lld near-tie rows, %lld of them differ)\n", (long long)rows,
              (long long)differ, (long long)near_tie, (long long)near_tie_differ);
}

}  // namespace

template <class S>
fx::CompareReport judge_reference_case(const GgufFile& f, const ModelConfig& c, const std::string& oracle, const std::string& cas) {
  const fx::FixtureFile E(oracle);
  const std::string precision = precision_name<S>();
  std::vector<int32_t> ids;
  for (double x : E.read(cas, "input_ids").v) ids.push_back(static_cast<int32_t>(x));
  ref::Model<S> m(f, c);
  fx::CaseData actual;
  std::string title = oracle.substr(oracle.rfind('/') + 1) + " " + cas + " " + precision;
  if (E.has(cas, "tokens")) {
    const int64_t n = E.read(cas, "tokens").size();
    const int64_t idx_layers = E.has(cas, "step_indexer_topk") ? E.read(cas, "step_indexer_topk").shape[1] : 0;
    Capture cap({op::kLogits, op::kIndexerTopk, op::kRouterIds, op::kRouterWeights});
    const ref::GenerateResult g = m.generate(ids, n, {}, &cap);
    actual = greedy_case(cap, g, c, ids, idx_layers, precision);
    title += " (cached decode vs the oracle's full recompute per step)";
  } else {
    Capture cap;
    m.forward(ids, &cap);
    actual = forward_case(cap, ids, precision);
  }
  fx::CompareReport rep = fx::compare_case(oracle, cas, actual);
  report(rep, check_differences(rep, E, cas, precision), title);
  return rep;
}

template fx::CompareReport judge_reference_case<double>(const GgufFile&, const ModelConfig&, const std::string&, const std::string&);
template fx::CompareReport judge_reference_case<float>(const GgufFile&, const ModelConfig&, const std::string&, const std::string&);

void judge_dense_attention(const GgufFile& f, const ModelConfig& c, const std::string& oracle, const std::string& cas, bool expect_pass) {
  const fx::FixtureFile E(oracle);
  std::vector<int32_t> ids;
  for (double x : E.read(cas, "input_ids").v) ids.push_back(static_cast<int32_t>(x));
  ref::ModelOptions o;
  o.dense_attention = true;
  ref::Model<double> m(f, c, o);
  const fx::Array got = array_of(m.forward(ids));
  const fx::Array want = E.read(cas, "logits");
  const fx::DatasetResult r = fx::judge_tensor("logits", want, got, "f64");
  int64_t argmax_diff = 0;  // positions whose greedy token changes
  const int64_t V = want.shape[1];
  for (int64_t t = 0; t < want.shape[0]; ++t)
    argmax_diff += argmax_lower(got.v.data() + t * V, V) != argmax_lower(want.v.data() + t * V, V);
  std::printf("[ judge ] dense attention %s %s logits: %s, nmse %.3e, max_rel %.3e, 1-cosine %.3e; greedy token differs on %lld of "
              "%lld positions\n",
              oracle.substr(oracle.rfind('/') + 1).c_str(), cas.c_str(), fx::verdict_name(r.verdict), r.nmse, r.max_rel, 1 - r.cosine,
              (long long)argmax_diff, (long long)want.shape[0]);
  if (expect_pass)
    EXPECT_EQ(r.verdict, fx::Verdict::Pass) << "dense == sparse below top_k: " << r.note;
  else
    EXPECT_EQ(r.verdict, fx::Verdict::Fail) << "the judge must catch attention that ignores the indexer";
}

}  // namespace mlaconf::test
