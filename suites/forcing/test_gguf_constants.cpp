// suites/forcing: every constant a backend reads from the GGUF, tested at a value where getting it wrong
// shows (issue 37, "scale"). A synthesized model's constants are set away from the usual ones:
//   attention.layer_norm_rms_epsilon 0.5    (hidden rows have mean(x²) ~ 1: eps 1e-5/1e-6 is invisible, 0.5 is not)
//   rope.freq_base                   50     (the tiny model's 1e6 or HF's 1e4 rotate by other angles)
//   expert_weights_scale             1.7 | 0.6, expert_weights_norm true | false (two models)
// and the backend's traced ops of a prefill are recomputed HERE from their traced inputs with the constants
// the test set (never read back from the file), written out from the math (../shared/docs/glm5-math.md):
//   every RMSNorm (attn_norm_out, q_a_norm, kv_latent, ffn_norm_out, final_norm) with eps;
//   k_pe_rope (interleaved pairs) and q_pe_rope with theta;
//   attn_latent_out: softmax over the selected keys of (q_absorbed · cache) / sqrt(qk_nope + qk_rope)
//     (the softmax scale's pieces: the MLA head dims, not the absorbed width 576);
//   router_weights: sigmoid(router_logits) at router_ids, normalized (flag) and scaled (routed scaling).
// Each check also computes the same op with the WRONG constant (the usual value, or the flag flipped) and
// requires that to be far outside the bound on this very data: the test can tell the constants apart.
// Reference f64: row NMSE <= 1e-12; CUDA (f16 storage): 1e-4 (skips "not supported" where there is none).
//   a third model adds YaRN (rope.scaling factor 4, original context 16, yarn_log_multiplier 0.1): k_pe /
//     q_pe with the YaRN frequencies (HF DeepSeek yarn, beta 32/1), the softmax scale times m²; the CUDA
//     backend refuses YaRN, so its case skips "not supported: ... YaRN ...".
// Not covered: the indexer LayerNorm eps (1e-6 fixed, not in the GGUF: op tests in suites/reference and
// suites/gpu), group-limited routing counts (n_group, n_group_used), the gating function.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <map>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/model_config.h"
#include "core/trace.h"
#include "core/weight_layout.h"
#include "reference/weights.h"
#include "suites/common/case_registry.h"
#include "suites/common/mem_trace.h"
#include "suites/core/gguf_bytes.h"
#include "synth/synth.h"
#include "tools/backend/backend.h"

namespace mlaconf::constants_test {
namespace {

constexpr double kEps = 0.5, kTheta = 50.0;
constexpr int64_t kT = 12;

using test::MemTrace;

struct Variant {
  double scale;
  bool norm;
  double yarn = 0;  // rope.scaling.factor (0: none); with it original context 16 and log multiplier 0.1
};
constexpr int64_t kYarnOrig = 16;
constexpr double kYarnLogMul = 0.1;

struct Model {
  GgufFile f;
  ModelConfig c;
  std::unique_ptr<ref::Weights<double>> w;
};
const Model& model(const Variant& v) {
  static std::map<std::tuple<double, bool, double>, std::unique_ptr<Model>> models;
  auto& m = models[{v.scale, v.norm, v.yarn}];
  if (!m) {
    const std::string dir = testing_gguf::scratch_dir("constants-model");
    synth::Options o;
    o.seed = 5;
    ModelConfig c = with_dims(ModelConfig::tiny_default(), DimOverrides{.layers = 2, .top_k = 6});
    c.rms_eps = kEps;
    c.rope_freq_base = kTheta;
    c.expert_weights_scale = v.scale;
    c.expert_weights_norm = v.norm;
    if (v.yarn > 0) {
      c.rope_scaling_factor = v.yarn;
      c.rope_scaling_orig_ctx = kYarnOrig;
      c.rope_yarn_log_multiplier = kYarnLogMul;
    }
    o.config = c;
    const std::string p =
        synth::write_model(o, dir + "/constants-" + std::to_string(v.norm) + "-" + std::to_string(v.yarn > 0) + ".gguf").front();
    GgufFile f = GgufFile::open(p);
    ModelConfig rc = ModelConfig::from_gguf(f);
    m = std::make_unique<Model>(Model{std::move(f), rc, nullptr});
    m->w = std::make_unique<ref::Weights<double>>(m->f, m->c, size_t(1) << 28);
  }
  return *m;
}

double row_nmse(const std::vector<double>& got, const std::vector<double>& want, int64_t t, int64_t n) {
  double e = 0, s = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double d = got[t * n + j] - want[t * n + j];
    e += d * d;
    s += want[t * n + j] * want[t * n + j];
  }
  return s > 0 ? e / s : (e > 0 ? INFINITY : 0.0);
}
double worst_row(const std::vector<double>& got, const std::vector<double>& want, int64_t rows) {
  const int64_t n = static_cast<int64_t>(want.size()) / rows;
  double w = 0;
  for (int64_t t = 0; t < rows; ++t) w = std::max(w, row_nmse(got, want, t, n));
  return w;
}
double best_row(const std::vector<double>& got, const std::vector<double>& want, int64_t rows, int64_t from = 0) {
  const int64_t n = static_cast<int64_t>(want.size()) / rows;
  double b = INFINITY;
  for (int64_t t = from; t < rows; ++t) b = std::min(b, row_nmse(got, want, t, n));
  return b;
}

// Rows of width `w` taken at columns [c0, c0 + n) of a [rows, w] array.
std::vector<double> cols(const std::vector<double>& a, int64_t w, int64_t c0, int64_t n) {
  const int64_t rows = static_cast<int64_t>(a.size()) / w;
  std::vector<double> o;
  for (int64_t t = 0; t < rows; ++t) o.insert(o.end(), a.begin() + t * w + c0, a.begin() + t * w + c0 + n);
  return o;
}
std::vector<double> rmsnorm(const std::vector<double>& x, const Eigen::VectorXd& w, double eps) {
  const int64_t D = w.size(), rows = static_cast<int64_t>(x.size()) / D;
  std::vector<double> y(x.size());
  for (int64_t t = 0; t < rows; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += x[t * D + i] * x[t * D + i];
    const double inv = 1.0 / std::sqrt(ss / D + eps);
    for (int64_t i = 0; i < D; ++i) y[t * D + i] = w[i] * x[t * D + i] * inv;
  }
  return y;
}
// RoPE frequencies theta^(-2i/n), i < n/2; with YaRN (HF DeepSeek "yarn", beta_fast 32, beta_slow 1): the
// low frequencies divided by the factor, a linear ramp between the dims whose beta_fast / beta_slow
// rotations fit in the original context.
std::vector<double> freqs(int64_t n, double theta, double factor = 0, int64_t orig = 0) {
  std::vector<double> f(n / 2);
  for (int64_t i = 0; i < n / 2; ++i) f[i] = 1.0 / std::pow(theta, 2.0 * i / n);
  if (factor > 1) {
    auto corr = [&](double rot) { return n * std::log(orig / (rot * 2 * M_PI)) / (2 * std::log(theta)); };
    double lo = std::max(std::floor(corr(32.0)), 0.0), hi = std::min(std::ceil(corr(1.0)), static_cast<double>(n - 1));
    if (lo == hi) hi += 0.001;
    for (int64_t i = 0; i < n / 2; ++i) {
      const double ramp = std::clamp((i - lo) / (hi - lo), 0.0, 1.0), keep = 1.0 - ramp;
      f[i] = f[i] / factor * (1.0 - keep) + f[i] * keep;
    }
  }
  return f;
}
// Interleaved RoPE of rows of `n` values (pairs (2i, 2i+1), angle pos * f[i]); row r at position
// r / per_pos (per_pos heads share a position).
std::vector<double> rope(const std::vector<double>& x, int64_t n, int64_t per_pos, const std::vector<double>& f) {
  std::vector<double> y(x.size());
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  for (int64_t r = 0; r < rows; ++r) {
    const double pos = static_cast<double>(r / per_pos);
    for (int64_t i = 0; i < n / 2; ++i) {
      const double a = pos * f[i], c = std::cos(a), s = std::sin(a);
      const double x0 = x[r * n + 2 * i], x1 = x[r * n + 2 * i + 1];
      y[r * n + 2 * i] = x0 * c - x1 * s;
      y[r * n + 2 * i + 1] = x0 * s + x1 * c;
    }
  }
  return y;
}

struct Ctx {
  std::string backend, where;
  double tol;
};
// got must match want (worst row <= tol); each wrong variant must be far from want on every row from
// `from_row` on (rows before it cannot tell: position 0 is not rotated, one key's softmax is 1 at any scale).
void expect_constant(const Ctx& c, const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                     int64_t rows, const std::map<std::string, std::vector<double>>& wrong, int64_t from_row = 0) {
  ASSERT_EQ(got.size(), want.size()) << c.where << " " << what;
  const double e = worst_row(got, want, rows);
  EXPECT_LE(e, c.tol) << c.where << " " << what << ": worst row NMSE " << e << " against the value computed with the GGUF's constant";
  for (const auto& [name, alt] : wrong) {
    const double sep = best_row(alt, want, rows, from_row);
    EXPECT_GE(sep, 1e-3) << c.where << " " << what << ": " << name << " is not told apart on every row (best row NMSE " << sep << ")";
    if (e > c.tol) {
      std::printf("  %s %s: worst row NMSE against %s: %.3e\n", c.where.c_str(), what.c_str(), name.c_str(), worst_row(got, alt, rows));
    }
  }
}

void check(const std::string& backend, Variant v) {
  const Model& m = model(v);
  const ModelConfig& c = m.c;
  ASSERT_DOUBLE_EQ(c.rms_eps, kEps);
  ASSERT_DOUBLE_EQ(c.rope_freq_base, kTheta);
  be::BackendOptions o;
  o.precision = "f64";
  std::unique_ptr<be::Backend> b;
  try {
    b = be::make_backend(backend, m.f, c, o);
  } catch (const NotSupported& e) {
    GTEST_SKIP() << "not supported: " << e.what();
  }
  std::vector<int32_t> ids(kT);
  for (int64_t t = 0; t < kT; ++t) ids[t] = static_cast<int32_t>((t * 131 + 7) % 1900);
  MemTrace tr;
  be::LayerRange all;
  all.head_all_rows = true;
  if (backend == "reference") b->set_range(all);
  b->forward(ids, &tr);
  const Ctx base{backend, "", backend == "reference" ? 1e-12 : 1e-4};
  auto& W = *m.w;
  const int64_t H = c.n_head, dl = c.kv_lora_rank, R = c.qk_rope(), nope = c.qk_nope(), dlat = c.latent_dim(), E = c.n_embd;
  for (int l = 0; l < c.n_layer_run(); ++l) {
    Ctx x = base;
    x.where = backend + " layer " + std::to_string(l);
    auto vec = [&](const char* n) { return Eigen::VectorXd(W.vec(wname::blk(l, n))); };
    // RMSNorms with eps.
    auto norm_check = [&](const std::string& what, const std::vector<double>& in, const Eigen::VectorXd& w, const std::vector<double>& got) {
      expect_constant(x, what + " (rms eps)", got, rmsnorm(in, w, kEps), kT,
                      {{"eps 1e-6", rmsnorm(in, w, 1e-6)}, {"eps 1e-5", rmsnorm(in, w, 1e-5)}});
    };
    norm_check("attn_norm_out", tr.at(l, op::kInputHidden).v, vec(wname::kAttnNorm), tr.at(l, op::kAttnNormOut).v);
    norm_check("q_a_norm", tr.at(l, op::kQA).v, vec(wname::kQANorm), tr.at(l, op::kQANorm).v);
    norm_check("kv_latent", cols(tr.at(l, op::kKvA).v, dl + R, 0, dl), vec(wname::kKvANorm), tr.at(l, op::kKvLatent).v);
    std::vector<double> a = tr.at(l, op::kInputHidden).v;
    const auto& ao = tr.at(l, op::kAttnOut).v;
    for (size_t i = 0; i < a.size(); ++i) a[i] += ao[i];
    norm_check("ffn_norm_out", a, vec(wname::kFfnNorm), tr.at(l, op::kFfnNormOut).v);
    // RoPE with theta: the key's rope part of kv_a, and each head's q_pe.
    const auto kpe = cols(tr.at(l, op::kKvA).v, dl + R, dl, R);
    const auto qpe = cols(tr.at(l, op::kQB).v, nope + R, nope, R);  // [T*H, R]
    const auto f = freqs(R, kTheta, v.yarn, kYarnOrig);
    if (v.yarn > 0) {  // YaRN moves the low frequencies only: positions from 6 on rotate them far enough to tell
      expect_constant(x, "k_pe_rope (rope theta, YaRN factor and original context)", tr.at(l, op::kKPeRope).v, rope(kpe, R, 1, f), kT,
                      {{"no YaRN", rope(kpe, R, 1, freqs(R, kTheta))}, {"YaRN factor 2", rope(kpe, R, 1, freqs(R, kTheta, 2, kYarnOrig))},
                       {"YaRN original context 64", rope(kpe, R, 1, freqs(R, kTheta, v.yarn, 64))}}, 6);
      expect_constant(x, "q_pe_rope (YaRN)", tr.at(l, op::kQPeRope).v, rope(qpe, R, H, f), kT * H,
                      {{"no YaRN", rope(qpe, R, H, freqs(R, kTheta))}}, 6 * H);
    } else {
      expect_constant(x, "k_pe_rope (rope theta)", tr.at(l, op::kKPeRope).v, rope(kpe, R, 1, f), kT,
                      {{"theta 1e4", rope(kpe, R, 1, freqs(R, 1e4))}, {"theta 1e6", rope(kpe, R, 1, freqs(R, 1e6))}}, 1);
      expect_constant(x, "q_pe_rope (rope theta)", tr.at(l, op::kQPeRope).v, rope(qpe, R, H, f), kT * H,
                      {{"theta 1e4", rope(qpe, R, H, freqs(R, 1e4))}}, H);
    }
    // Softmax scale: attention over the selected keys of this pass's cache (a prefill: rows 0..T-1).
    const auto& qa = tr.at(l, op::kQAbsorbed).v;       // [T, H, dlat]
    const auto& cache = tr.at(l, op::kLatentCache).v;  // [T, dlat]
    const auto& sel = tr.at(l, op::kIndexerTopk).i;    // [T, top_k]
    const int64_t K = c.indexer_top_k;
    auto attend = [&](double scale) {
      std::vector<double> out(kT * H * dl, 0.0);
      for (int64_t t = 0; t < kT; ++t)
        for (int64_t h = 0; h < H; ++h) {
          std::vector<double> s;
          std::vector<int32_t> keys;
          for (int64_t j = 0; j < K; ++j) {
            const int32_t k = sel[t * K + j];
            if (k < 0) continue;
            double d = 0;
            for (int64_t i = 0; i < dlat; ++i) d += qa[(t * H + h) * dlat + i] * cache[k * dlat + i];
            s.push_back(d * scale);
            keys.push_back(k);
          }
          double mx = -INFINITY, z = 0;
          for (double v : s) mx = std::max(mx, v);
          for (double& v : s) z += (v = std::exp(v - mx));
          for (size_t j = 0; j < keys.size(); ++j)
            for (int64_t i = 0; i < dl; ++i) out[(t * H + h) * dl + i] += s[j] / z * cache[keys[j] * dlat + i];
        }
      return out;
    };
    // With YaRN (DeepSeek): times m², m = 1 + yarn_log_multiplier · ln(factor).
    const double m = v.yarn > 0 ? 1.0 + kYarnLogMul * std::log(v.yarn) : 1.0;
    const double scale = m * m / std::sqrt(static_cast<double>(nope + R));
    std::map<std::string, std::vector<double>> wrong = {{"1/sqrt(kv_lora + rope)", attend(m * m / std::sqrt(static_cast<double>(dlat)))},
                                                        {"1/sqrt(qk_nope)", attend(m * m / std::sqrt(static_cast<double>(nope)))}};
    if (v.yarn > 0) wrong["without the YaRN m^2"] = attend(1.0 / std::sqrt(static_cast<double>(nope + R)));
    expect_constant(x, "attn_latent_out (softmax scale 1/sqrt(qk_nope + qk_rope), YaRN m^2)", tr.at(l, op::kAttnLatentOut).v,
                    attend(scale), kT, wrong, 1);
    // Router weights: sigmoid at the chosen ids, normalized (flag) and scaled (routed_scaling_factor).
    if (c.is_moe_layer(l)) {
      const auto& lg = tr.at(l, op::kRouterLogits).v;
      const auto& rid = tr.at(l, op::kRouterIds).i;
      const int64_t U = c.n_expert_used;
      auto weights = [&](bool norm, double sc) {
        std::vector<double> w(kT * U);
        for (int64_t t = 0; t < kT; ++t) {
          double sum = 0;
          for (int64_t j = 0; j < U; ++j) sum += w[t * U + j] = 1.0 / (1.0 + std::exp(-lg[t * c.n_expert + rid[t * U + j]]));
          for (int64_t j = 0; j < U; ++j) w[t * U + j] = (norm ? w[t * U + j] / sum : w[t * U + j]) * sc;
        }
        return w;
      };
      expect_constant(x, "router_weights (expert_weights_scale, expert_weights_norm)", tr.at(l, op::kRouterWeights).v,
                      weights(v.norm, v.scale), kT,
                      {{"scale 1", weights(v.norm, 1.0)}, {"scale 2.5 (the tiny model's)", weights(v.norm, 2.5)},
                       {"norm flag flipped", weights(!v.norm, v.scale)}});
    }
    (void)E;
  }
  // The final norm, on the last layer's output.
  Ctx x = base;
  x.where = backend + " model";
  const auto& last = tr.at(static_cast<int>(c.n_layer_run() - 1), op::kOutputHidden).v;
  const Eigen::VectorXd wo = W.vec(wname::kOutputNorm);
  if (const MemTrace::Rec* fn = tr.get(-1, op::kFinalNorm)) {
    const int64_t rows = fn->shape.empty() ? 0 : fn->shape[0];
    const std::vector<double> in(last.end() - rows * E, last.end());
    expect_constant(x, "final_norm (rms eps)", fn->v, rmsnorm(in, wo, kEps), rows,
                    {{"eps 1e-6", rmsnorm(in, wo, 1e-6)}});
  } else {
    ADD_FAILURE() << backend << ": the trace holds no final_norm";
  }
}

const bool registered = [] {
  for (const char* backend : {"reference", "cuda"})
    for (Variant v : {Variant{1.7, true}, Variant{0.6, false}, Variant{1.7, true, 4.0}})
      test::register_case("GgufConstants",
                          test::CaseName("gguf_constants")
                              .p("backend", backend)
                              .p("rms_eps", "0.5")
                              .p("rope_theta", "50")
                              .p("rope_scaling", v.yarn > 0 ? "yarn_factor4_orig16_logmul0.1" : "none")
                              .p("expert_weights_scale", v.scale == 1.7 ? "1.7" : "0.6")
                              .p("expert_weights_norm", v.norm ? "true" : "false")
                              .str(),
                          [backend = std::string(backend), v] { check(backend, v); });
  return true;
}();

}  // namespace
}  // namespace mlaconf::constants_test
