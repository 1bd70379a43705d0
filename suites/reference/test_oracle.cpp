// suites/reference: the Eigen reference against the transformers float64 oracle
// (../shared/models/glm-dsa-tiny.oracle.h5): every case, every per-layer tensor it holds, in float64
// (NMSE <= 1e-13) and float32 (NMSE <= 1e-9); top-k and router ids identical; greedy tokens identical.
// NMSE = Σ(a-b)² / Σb² per tensor. The oracle stored float32 values of a float64 computation, whose
// rounding alone is ~1e-15 NMSE.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "suites/common/case_registry.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "reference/model.h"
#include "suites/reference/capture.h"
#include "suites/reference/oracle_h5.h"

namespace mlaconf::test {
namespace {

const std::string kModel = std::string(MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.gguf";
const std::string kOracle = std::string(MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.oracle.h5";

template <class S>
constexpr double kTol = 0;
template <>
constexpr double kTol<double> = 1e-13;  // NMSE, float64 reference
template <>
constexpr double kTol<float> = 1e-9;    // NMSE, float32 reference

template <class S>
const char* dtype_name() {
  return sizeof(S) == 8 ? "f64" : "f32";
}

// The worst NMSE per tensor class, printed at the end of a case (the figures the report quotes).
struct Worst {
  std::map<std::string, double> v;
  void add(const std::string& cls, double x) { v[cls] = std::max(v.count(cls) ? v[cls] : 0.0, x); }
  void print(const std::string& title) const {
    std::printf("[ nmse ] %s\n", title.c_str());
    for (auto& [k, x] : v) std::printf("[ nmse ]   %-22s %.3e\n", k.c_str(), x);
  }
};

bool shared_present() { return std::filesystem::exists(kModel) && std::filesystem::exists(kOracle); }

// Rows [r0, r0+n) of a record of shape [rows, cols...], flattened.
std::vector<double> rows_of(const Record& r, int64_t r0, int64_t n) {
  size_t w = r.f.size() / static_cast<size_t>(r.shape[0]);
  return std::vector<double>(r.f.begin() + r0 * w, r.f.begin() + (r0 + n) * w);
}
std::vector<int32_t> rows_of_i(const Record& r, int64_t r0, int64_t n) {
  size_t w = r.i.size() / static_cast<size_t>(r.shape[0]);
  return std::vector<int32_t>(r.i.begin() + r0 * w, r.i.begin() + (r0 + n) * w);
}

// A full-forward case: every per-layer tensor the oracle holds.
// Any oracle file in the shared oracle's layout (the shared one, or an HF run on another model).
template <class S>
void full_forward_case(const std::string& cas, const std::string& model = kModel, const std::string& oracle = kOracle) {
  if (!std::filesystem::exists(model) || !std::filesystem::exists(oracle))
    GTEST_SKIP() << "skipped: shared data absent (" << oracle << ")";
  GgufFile f = GgufFile::open(model);
  ModelConfig c = ModelConfig::from_gguf(f);
  H5File h(oracle);
  const std::string g = "/" + cas;
  std::vector<int32_t> ids = h.read_i32(g + "/input_ids");
  ref::Model<S> m(f, c);
  Capture cap;
  m.forward(ids, &cap);
  const double tol = kTol<S>;
  Worst worst;
  auto check_f = [&](int layer, const std::string& name, const std::string& path) {
    if (!h.exists(path)) return;
    const auto* r = cap.get(layer, name);
    ASSERT_NE(r, nullptr) << name << " not reported for layer " << layer;
    std::vector<double> want = h.read_f64(path);
    double e = nmse(r->back().f, want);
    worst.add(name, e);
    EXPECT_LE(e, tol) << cas << " layer " << layer << " " << name << " NMSE";
  };
  for (int64_t l = 0; l < c.n_layer_run(); ++l) {
    const std::string lp = g + "/layers/" + std::to_string(l) + "/";
    const int L = static_cast<int>(l);
    for (const char* n : {op::kInputHidden, op::kAttnOut, op::kMlpOut, op::kOutputHidden, op::kIndexerScores,
                          op::kRouterWeights})
      check_f(L, n, lp + n);
    // Gaps: differences of near-equal scores, so judged against the scores' scale, not their own.
    for (const char* n : {op::kIndexerTopkGap, op::kRouterTopkGap}) {
      if (!h.exists(lp + n)) continue;
      const auto* r = cap.get(L, n);
      ASSERT_NE(r, nullptr);
      std::vector<double> want = h.read_f64(lp + n);
      const std::string scale_of = std::string(n) == op::kIndexerTopkGap ? op::kIndexerScores : op::kRouterWeights;
      const double scale = h.exists(lp + scale_of) ? max_abs(h.read_f64(lp + scale_of)) : 1.0;
      double worst_abs = 0;
      for (size_t k = 0; k < want.size(); ++k) {
        if (std::isnan(want[k])) {
          EXPECT_TRUE(std::isnan(r->back().f[k])) << n << " row " << k;
          continue;
        }
        worst_abs = std::max(worst_abs, std::abs(r->back().f[k] - want[k]));
      }
      worst.add(std::string(n) + " (abs/scale)", worst_abs / scale);
      EXPECT_LE(worst_abs / scale, sizeof(S) == 8 ? 1e-6 : 1e-4) << cas << " layer " << l << " " << n;
    }
    // Index sets: identical on rows the oracle does not flag as a tie at the boundary.
    if (h.exists(lp + op::kIndexerTopk)) {
      std::vector<int64_t> shp;
      std::vector<int32_t> want = h.read_i32(lp + op::kIndexerTopk, &shp);
      std::vector<int32_t> tie = h.read_i32(lp + op::kIndexerTopkTie);
      const auto* r = cap.get(L, op::kIndexerTopk);
      ASSERT_NE(r, nullptr);
      ASSERT_EQ(r->back().shape, shp);
      int64_t differing = 0, ties = 0;
      for (int64_t s = 0; s < shp[0]; ++s) {
        if (tie[s]) {
          ++ties;
          continue;
        }
        for (int64_t j = 0; j < shp[1]; ++j)
          if (r->back().i[s * shp[1] + j] != want[s * shp[1] + j]) {
            ++differing;
            break;
          }
      }
      EXPECT_EQ(differing, 0) << cas << " layer " << l << ": indexer top-k rows differing (" << ties << " tie rows skipped)";
    }
    if (h.exists(lp + op::kRouterIds)) {
      std::vector<int32_t> want = h.read_i32(lp + op::kRouterIds);
      const auto* r = cap.get(L, op::kRouterIds);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(r->back().i, want) << cas << " layer " << l << ": router ids";
    }
  }
  check_f(-1, op::kFinalNorm, g + "/final_norm");
  check_f(-1, op::kLogits, g + "/logits");
  worst.print(cas + " " + dtype_name<S>() + " (worst over layers)");
}

// Greedy generation with the caches against the oracle's full recompute per step.
template <class S>
void greedy_case(const std::string& cas, const std::string& model = kModel, const std::string& oracle = kOracle) {
  if (!std::filesystem::exists(model) || !std::filesystem::exists(oracle))
    GTEST_SKIP() << "skipped: shared data absent (" << oracle << ")";
  GgufFile f = GgufFile::open(model);
  ModelConfig c = ModelConfig::from_gguf(f);
  H5File h(oracle);
  const std::string g = "/" + cas;
  std::vector<int32_t> ids = h.read_i32(g + "/input_ids");
  std::vector<int32_t> want_tokens = h.read_i32(g + "/tokens");
  std::vector<double> want_margins = h.read_f64(g + "/margins");
  std::vector<int64_t> lshape;
  std::vector<double> want_logits = h.read_f64(g + "/step_logits", &lshape);
  const int64_t n = static_cast<int64_t>(want_tokens.size()), V = lshape[1];
  ref::Model<S> m(f, c);
  Capture cap({op::kLogits, op::kIndexerTopk, op::kRouterIds, op::kRouterWeights});
  ref::GenerateResult r = m.generate(ids, n, {}, &cap);
  EXPECT_EQ(r.tokens, want_tokens) << "greedy tokens";
  Worst worst;
  worst.add("margins", nmse(r.margins, want_margins));
  EXPECT_LE(nmse(r.margins, want_margins), kTol<S> * 100) << "margins";  // differences of logits
  // Step i's values: the last row of the prefill (i = 0) or the i-th decode call.
  auto step_rows = [&](int layer, const char* name, int64_t i) -> const Record& {
    const auto* rs = cap.get(layer, name);
    if (!rs || static_cast<int64_t>(rs->size()) < n) throw std::runtime_error(std::string(name) + " missing");
    return (*rs)[static_cast<size_t>(i)];
  };
  const auto& lg = *cap.get(-1, op::kLogits);
  ASSERT_EQ(static_cast<int64_t>(lg.size()), n);
  std::vector<int64_t> tshape, rshape;
  std::vector<int32_t> want_topk = h.read_i32(g + "/step_indexer_topk", &tshape);    // [n, L, k]
  std::vector<int32_t> want_tie = h.read_i32(g + "/step_indexer_topk_tie");         // [n, L]
  std::vector<int64_t> moe_layers;
  for (int64_t l = 0; l < c.n_layer_run(); ++l)
    if (c.is_moe_layer(l)) moe_layers.push_back(l);
  std::vector<int32_t> want_rid;  // [n, L_moe, K]; absent for a model without MoE layers
  std::vector<double> want_rw;
  rshape = {n, 0, 0};
  if (h.exists(g + "/step_router_ids")) {
    want_rid = h.read_i32(g + "/step_router_ids", &rshape);
    want_rw = h.read_f64(g + "/step_router_weights");
  }
  ASSERT_EQ(static_cast<int64_t>(moe_layers.size()), rshape[1]);
  std::vector<double> rw_all;
  for (int64_t i = 0; i < n; ++i) {
    const Record& rec = lg[static_cast<size_t>(i)];
    const int64_t last = rec.shape[0] - 1;
    std::vector<double> want(want_logits.begin() + i * V, want_logits.begin() + (i + 1) * V);
    double e = nmse(rows_of(rec, last, 1), want);
    worst.add("step_logits", e);
    EXPECT_LE(e, kTol<S>) << "step " << i << " logits";
    for (int64_t l = 0; l < tshape[1]; ++l) {
      if (want_tie[i * tshape[1] + l]) continue;
      const Record& tk = step_rows(static_cast<int>(l), op::kIndexerTopk, i);
      std::vector<int32_t> got = rows_of_i(tk, tk.shape[0] - 1, 1);
      std::vector<int32_t> w(want_topk.begin() + (i * tshape[1] + l) * tshape[2],
                             want_topk.begin() + (i * tshape[1] + l + 1) * tshape[2]);
      EXPECT_EQ(got, w) << "step " << i << " layer " << l << " indexer top-k";
    }
    for (int64_t j = 0; j < rshape[1]; ++j) {
      const int L = static_cast<int>(moe_layers[j]);
      const Record& ri = step_rows(L, op::kRouterIds, i);
      std::vector<int32_t> got = rows_of_i(ri, ri.shape[0] - 1, 1);
      std::vector<int32_t> w(want_rid.begin() + (i * rshape[1] + j) * rshape[2],
                             want_rid.begin() + (i * rshape[1] + j + 1) * rshape[2]);
      EXPECT_EQ(got, w) << "step " << i << " layer " << L << " router ids";
      const Record& rwr = step_rows(L, op::kRouterWeights, i);
      std::vector<double> gw = rows_of(rwr, rwr.shape[0] - 1, 1);
      rw_all.insert(rw_all.end(), gw.begin(), gw.end());
    }
  }
  if (!moe_layers.empty()) {
    double e = nmse(rw_all, want_rw);
    worst.add("step_router_weights", e);
    EXPECT_LE(e, kTol<S>) << "step router weights";
  }
  worst.print(cas + " " + dtype_name<S>() + " (cached decode vs oracle full recompute)");
}

// Negative control: dense attention (indexer ignored) must agree on prompt12 (fewer tokens than
// top_k, so sparse == dense) and must fail prompt200.
void dense_control_case() {
  if (!shared_present()) GTEST_SKIP() << "skipped: shared data absent (" << kOracle << ")";
  GgufFile f = GgufFile::open(kModel);
  ModelConfig c = ModelConfig::from_gguf(f);
  H5File h(kOracle);
  ref::ModelOptions o;
  o.dense_attention = true;
  for (const char* cas : {"prompt12", "prompt200"}) {
    std::vector<int32_t> ids = h.read_i32(std::string("/") + cas + "/input_ids");
    ref::Model<double> m(f, c, o);
    ref::Mat<double> lg = m.forward(ids);
    std::vector<double> got(lg.data(), lg.data() + lg.size());
    std::vector<int64_t> shp;
    std::vector<double> want = h.read_f64(std::string("/") + cas + "/logits", &shp);
    double e = nmse(got, want);
    int64_t argmax_diff = 0;  // positions whose greedy token changes
    for (int64_t t = 0; t < shp[0]; ++t) {
      auto row = [&](const std::vector<double>& v) {
        return std::max_element(v.begin() + t * shp[1], v.begin() + (t + 1) * shp[1]) - (v.begin() + t * shp[1]);
      };
      argmax_diff += row(got) != row(want);
    }
    std::printf("[ nmse ] dense attention %s logits %.3e, argmax differs on %lld of %lld positions\n", cas, e,
                static_cast<long long>(argmax_diff), static_cast<long long>(shp[0]));
    if (std::string(cas) == "prompt12")
      EXPECT_LE(e, kTol<double>) << "dense == sparse below top_k";
    else
      EXPECT_GT(e, 1e-3) << "the oracle must catch attention that ignores the indexer";
  }
}


struct Registrar {
  Registrar() {
    for (const char* cas : {"prompt12", "prompt200"}) {
      std::string s = cas;
      register_case("reference", "oracle_forward(case=" + s + ",dtype=f64)", [s] { full_forward_case<double>(s); });
      register_case("reference", "oracle_forward(case=" + s + ",dtype=f32)", [s] { full_forward_case<float>(s); });
    }
    register_case("reference", "oracle_greedy(case=greedy200x24,dtype=f64)", [] { greedy_case<double>("greedy200x24"); });
    register_case("reference", "oracle_greedy(case=greedy200x24,dtype=f32)", [] { greedy_case<float>("greedy200x24"); });
    register_case("reference", "negative_dense_attention(case=prompt12+prompt200,dtype=f64)", [] { dense_control_case(); });
  }
} registrar;

}  // namespace
}  // namespace mlaconf::test
