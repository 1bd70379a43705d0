// suites/hf: the Eigen reference against Hugging Face transformers 5.17.0 run in float64 on configurations
// the shared oracle does not cover (fixtures/data/hf/*.h5, made by tools/hf_oracle; docs/HF_CROSSCHECK.md):
// full GLM-5 attention/indexer dims for one layer, group-limited routing with GLM-5.2 shared indexer
// layers, and deepseek32 (NeoX indexer RoPE, YaRN). Each model is re-synthesized with the exact
// `mlaconf synth` command recorded in its HDF5 file and must hash to the recorded sha256 (else the
// generator changed and the oracle is stale: a clear failure, not a silent pass).
//
// Checks, per case: every per-layer tensor and final_norm/logits by NMSE = Σ(a-b)²/Σb² (float64 reference
// <= 1e-13, float32 reference <= 1e-9); indexer top-k sets identical on rows the oracle does not flag as a
// tie; router expert ids identical; top-k / router gaps within 1e-6 (f64) / 1e-4 (f32) of the score scale;
// greedy tokens identical (reference decode with caches vs HF full recompute per step). Negative control:
// attention that ignores the indexer must differ from the oracle.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "suites/common/case_registry.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "fixtures/digest.h"
#include "reference/model.h"
#include "suites/reference/capture.h"
#include "suites/reference/oracle_h5.h"

namespace mlaconf::test {
namespace {

namespace fs = std::filesystem;

const fs::path kDataDir = fs::path(MLACONF_SOURCE_DIR) / "fixtures" / "data" / "hf";

template <class S>
constexpr double kTol = sizeof(S) == 8 ? 1e-13 : 1e-9;  // NMSE
template <class S>
const char* dtype_name() {
  return sizeof(S) == 8 ? "f64" : "f32";
}

struct Worst {
  std::map<std::string, double> v;
  void add(const std::string& cls, double x) { v[cls] = std::max(v.count(cls) ? v[cls] : 0.0, x); }
  void print(const std::string& title) const {
    std::printf("[ nmse ] %s\n", title.c_str());
    for (auto& [k, x] : v) std::printf("[ nmse ]   %-28s %.3e\n", k.c_str(), x);
  }
};

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  fx::Sha256 h;
  std::vector<char> buf(size_t(1) << 22);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) h.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  return h.hex();
}

// The root groups of an HDF5 file (the cases).
std::vector<std::string> root_groups(const std::string& path) {
  std::vector<std::string> out;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return out;
  H5Literate(
      f, H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* name, const H5L_info_t*, void* op) -> herr_t {
        static_cast<std::vector<std::string>*>(op)->push_back(name);
        return 0;
      },
      &out);
  H5Fclose(f);
  return out;
}

// A string attribute of the root group. h5py writes variable-length UTF-8 strings; reading them needs a
// memory type with the same character set.
std::string root_attr(const std::string& path, const std::string& name) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error(path + ": cannot open as HDF5");
  hid_t a = H5Aopen_by_name(f, "/", name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  std::string out;
  if (a >= 0) {
    hid_t t = H5Aget_type(a);
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_cset(mt, H5Tget_cset(t));
    if (H5Tis_variable_str(t) > 0) {
      char* s = nullptr;
      H5Tset_size(mt, H5T_VARIABLE);
      if (H5Aread(a, mt, &s) >= 0 && s) out = s;
      if (s) H5free_memory(s);
    } else {
      std::vector<char> buf(H5Tget_size(t) + 1, 0);
      H5Tset_size(mt, H5Tget_size(t));
      if (H5Aread(a, mt, buf.data()) >= 0) out = buf.data();
    }
    H5Tclose(mt);
    H5Tclose(t);
    H5Aclose(a);
  }
  H5Fclose(f);
  if (out.empty()) throw std::runtime_error(path + ": missing or empty root attribute '" + name + "'");
  return out;
}

// The synthesized GGUF an oracle file was made from: re-made with the recorded `mlaconf synth` options
// (cached under the build dir, keyed by the recorded sha256), and checked byte for byte by sha256.
// Returns "" and sets *why when it cannot be reproduced.
std::string model_for(const std::string& h5, std::string* why) {
  const std::string cmd = root_attr(h5, "synth_cmd");  // "mlaconf synth <opts> --out NAME.gguf"
  const std::string want = root_attr(h5, "gguf_sha256");
  const std::string label = root_attr(h5, "label");
  const std::string head = "mlaconf synth ";
  const size_t out_at = cmd.rfind(" --out ");
  if (cmd.rfind(head, 0) != 0 || out_at == std::string::npos) {
    *why = h5 + ": attribute synth_cmd is not 'mlaconf synth ... --out F': '" + cmd + "'";
    return "";
  }
  const std::string opts = cmd.substr(head.size(), out_at - head.size());
  if (opts.find_first_of(";&|`$<>\\\"'") != std::string::npos) {
    *why = h5 + ": synth_cmd holds shell characters";
    return "";
  }
  const fs::path dir = fs::path(MLACONF_BINARY_DIR) / "hf_models";
  fs::create_directories(dir);
  const fs::path gguf = dir / (label + "-" + want.substr(0, 16) + ".gguf");
  if (fs::exists(gguf) && file_sha256(gguf.string()) == want) return gguf.string();
  // Temporary name + rename: parallel ctest processes may synthesize the same model.
  const fs::path tmp = dir / (label + ".tmp" + std::to_string(getpid()) + ".gguf");
  const std::string run = std::string(MLACONF_CLI) + " synth " + opts + " --out " + tmp.string() + " > /dev/null";
  const int rc = std::system(run.c_str());
  if (rc != 0) {
    *why = "'" + run + "' failed (exit " + std::to_string(rc) + ")";
    return "";
  }
  const std::string got = file_sha256(tmp.string());
  if (got != want) {
    std::error_code ec;
    fs::remove(tmp, ec);
    *why = "`mlaconf synth " + opts + "` no longer reproduces the GGUF the HF oracle " + h5 + " was made from (sha256 " +
           got + ", recorded " + want + "): the synthesizer's output changed, so this oracle is stale; re-run "
           "tools/hf_oracle on the GPU host (docs/HF_CROSSCHECK.md) or restore the generator";
    return "";
  }
  fs::rename(tmp, gguf);
  return gguf.string();
}

// A model loaded for one test: GGUF, config, oracle file.
struct Loaded {
  std::string gguf;
  std::unique_ptr<GgufFile> f;
  ModelConfig c;
};

bool load(const std::string& h5, Loaded& L) {
  std::string why;
  L.gguf = model_for(h5, &why);
  if (L.gguf.empty()) {
    ADD_FAILURE() << why;
    return false;
  }
  L.f = std::make_unique<GgufFile>(GgufFile::open(L.gguf));
  L.c = ModelConfig::from_gguf(*L.f);
  return true;
}

template <class S>
void forward_case(const std::string& h5, const std::string& cas) {
  Loaded L;
  if (!load(h5, L)) return;
  const ModelConfig& c = L.c;
  H5File h(h5);
  const std::string g = "/" + cas;
  std::vector<int32_t> ids = h.read_i32(g + "/input_ids");
  ref::Model<S> m(*L.f, c);
  Capture cap;
  m.forward(ids, &cap);
  const double tol = kTol<S>;
  Worst worst;
  auto check_f = [&](int layer, const std::string& name, const std::string& path) {
    if (!h.exists(path)) return;
    const auto* r = cap.get(layer, name);
    ASSERT_NE(r, nullptr) << name << " not reported for layer " << layer;
    const double e = nmse(r->back().f, h.read_f64(path));
    worst.add(name, e);
    EXPECT_LE(e, tol) << cas << " layer " << layer << " " << name << " NMSE";
  };
  int64_t topk_rows = 0, tie_rows = 0;
  for (int64_t l = 0; l < c.n_layer_run(); ++l) {
    const std::string lp = g + "/layers/" + std::to_string(l) + "/";
    const int Li = static_cast<int>(l);
    for (const char* n : {op::kInputHidden, op::kAttnOut, op::kMlpOut, op::kOutputHidden, op::kIndexerScores,
                          op::kRouterWeights})
      check_f(Li, n, lp + n);
    for (const char* n : {op::kIndexerTopkGap, op::kRouterTopkGap}) {
      if (!h.exists(lp + n)) continue;
      const auto* r = cap.get(Li, n);
      ASSERT_NE(r, nullptr) << n << " layer " << l;
      std::vector<double> want = h.read_f64(lp + n);
      ASSERT_EQ(r->back().f.size(), want.size()) << n;
      const bool idx = std::string(n) == op::kIndexerTopkGap;
      const std::string scale_of = idx ? op::kIndexerScores : op::kRouterWeights;
      const double scale = h.exists(lp + scale_of) ? max_abs(h.read_f64(lp + scale_of)) : 1.0;
      double worst_abs = 0;
      for (size_t k = 0; k < want.size(); ++k) {
        if (!std::isfinite(want[k])) {  // NaN: no selection (row <= k keys); inf: K = n_expert
          EXPECT_EQ(std::isnan(r->back().f[k]), std::isnan(want[k])) << n << " row " << k;
          continue;
        }
        worst_abs = std::max(worst_abs, std::abs(r->back().f[k] - want[k]));
      }
      worst.add(std::string(n) + " (abs/scale)", worst_abs / scale);
      EXPECT_LE(worst_abs / scale, sizeof(S) == 8 ? 1e-6 : 1e-4) << cas << " layer " << l << " " << n;
    }
    if (h.exists(lp + op::kIndexerTopk)) {
      std::vector<int64_t> shp;
      std::vector<int32_t> want = h.read_i32(lp + op::kIndexerTopk, &shp);
      std::vector<int32_t> tie = h.read_i32(lp + op::kIndexerTopkTie);
      const auto* r = cap.get(Li, op::kIndexerTopk);
      ASSERT_NE(r, nullptr);
      ASSERT_EQ(r->back().shape, shp);
      int64_t differing = 0;
      for (int64_t s = 0; s < shp[0]; ++s) {
        if (s + 1 > shp[1]) ++topk_rows;
        if (tie[s]) {
          ++tie_rows;
          continue;
        }
        if (!std::equal(want.begin() + s * shp[1], want.begin() + (s + 1) * shp[1], r->back().i.begin() + s * shp[1]))
          ++differing;
      }
      EXPECT_EQ(differing, 0) << cas << " layer " << l << ": indexer top-k rows differing";
    }
    if (h.exists(lp + op::kRouterIds)) {
      const auto* r = cap.get(Li, op::kRouterIds);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(r->back().i, h.read_i32(lp + op::kRouterIds)) << cas << " layer " << l << ": router ids";
    }
  }
  check_f(-1, op::kFinalNorm, g + "/final_norm");
  check_f(-1, op::kLogits, g + "/logits");
  std::printf("[ info ] %lld layer-rows where the indexer really selects, %lld tie rows skipped\n",
              static_cast<long long>(topk_rows), static_cast<long long>(tie_rows));
  worst.print(fs::path(h5).stem().string() + " " + cas + " " + dtype_name<S>() + " (worst over layers)");
}

template <class S>
void greedy_case(const std::string& h5, const std::string& cas) {
  Loaded L;
  if (!load(h5, L)) return;
  const ModelConfig& c = L.c;
  H5File h(h5);
  const std::string g = "/" + cas;
  std::vector<int32_t> ids = h.read_i32(g + "/input_ids");
  std::vector<int32_t> want_tokens = h.read_i32(g + "/tokens");
  std::vector<double> want_margins = h.read_f64(g + "/margins");
  std::vector<int64_t> lshape;
  std::vector<double> want_logits = h.read_f64(g + "/step_logits", &lshape);
  const int64_t n = static_cast<int64_t>(want_tokens.size()), V = lshape[1];
  ref::Model<S> m(*L.f, c);
  Capture cap({op::kLogits, op::kIndexerTopk, op::kRouterIds, op::kRouterWeights});
  ref::GenerateResult r = m.generate(ids, n, {}, &cap);
  EXPECT_EQ(r.tokens, want_tokens) << "greedy tokens";
  Worst worst;
  const double em = nmse(r.margins, want_margins);
  worst.add("margins", em);
  EXPECT_LE(em, kTol<S> * 100) << "margins (differences of logits)";
  const auto* lg = cap.get(-1, op::kLogits);
  ASSERT_NE(lg, nullptr);
  ASSERT_EQ(static_cast<int64_t>(lg->size()), n);
  auto last_row = [](const Record& rec) {
    const size_t w = (rec.f.empty() ? rec.i.size() : rec.f.size()) / static_cast<size_t>(rec.shape[0]);
    return w;
  };
  std::vector<int64_t> tshape;
  std::vector<int32_t> want_topk = h.read_i32(g + "/step_indexer_topk", &tshape);  // [n, L, k]
  std::vector<int32_t> want_tie = h.read_i32(g + "/step_indexer_topk_tie");        // [n, L]
  std::vector<double> step_rw_got, step_rw_want;
  for (int64_t i = 0; i < n; ++i) {
    const Record& rec = (*lg)[static_cast<size_t>(i)];
    const size_t w = last_row(rec);
    std::vector<double> got(rec.f.end() - static_cast<std::ptrdiff_t>(w), rec.f.end());
    std::vector<double> want(want_logits.begin() + i * V, want_logits.begin() + (i + 1) * V);
    const double e = nmse(got, want);
    worst.add("step_logits", e);
    EXPECT_LE(e, kTol<S>) << "step " << i << " logits";
    for (int64_t l = 0; l < tshape[1]; ++l) {
      if (want_tie[i * tshape[1] + l]) continue;
      const auto* tk = cap.get(static_cast<int>(l), op::kIndexerTopk);
      ASSERT_TRUE(tk && static_cast<int64_t>(tk->size()) >= n) << "layer " << l << " top-k records";
      const Record& tr = (*tk)[static_cast<size_t>(i)];
      const size_t tw = last_row(tr);
      std::vector<int32_t> gotk(tr.i.end() - static_cast<std::ptrdiff_t>(tw), tr.i.end());
      std::vector<int32_t> wk(want_topk.begin() + (i * tshape[1] + l) * tshape[2],
                              want_topk.begin() + (i * tshape[1] + l + 1) * tshape[2]);
      EXPECT_EQ(gotk, wk) << "step " << i << " layer " << l << " indexer top-k";
    }
    if (!h.exists(g + "/step_router_ids")) continue;
    std::vector<int64_t> rshape;
    std::vector<int32_t> want_rid = h.read_i32(g + "/step_router_ids", &rshape);  // [n, L_moe, K]
    std::vector<double> want_rw = h.read_f64(g + "/step_router_weights");
    int64_t j = 0;
    for (int64_t l = 0; l < c.n_layer_run(); ++l) {
      if (!c.is_moe_layer(l)) continue;
      const auto* ri = cap.get(static_cast<int>(l), op::kRouterIds);
      const auto* rw = cap.get(static_cast<int>(l), op::kRouterWeights);
      ASSERT_TRUE(ri && rw && static_cast<int64_t>(ri->size()) >= n) << "layer " << l << " router records";
      const Record& a = (*ri)[static_cast<size_t>(i)];
      const Record& b = (*rw)[static_cast<size_t>(i)];
      std::vector<int32_t> gi(a.i.end() - rshape[2], a.i.end());
      std::vector<int32_t> wi(want_rid.begin() + (i * rshape[1] + j) * rshape[2],
                              want_rid.begin() + (i * rshape[1] + j + 1) * rshape[2]);
      EXPECT_EQ(gi, wi) << "step " << i << " layer " << l << " router ids";
      step_rw_got.insert(step_rw_got.end(), b.f.end() - rshape[2], b.f.end());
      step_rw_want.insert(step_rw_want.end(), want_rw.begin() + (i * rshape[1] + j) * rshape[2],
                          want_rw.begin() + (i * rshape[1] + j + 1) * rshape[2]);
      ++j;
    }
  }
  if (!step_rw_want.empty()) {
    const double e = nmse(step_rw_got, step_rw_want);
    worst.add("step_router_weights", e);
    EXPECT_LE(e, kTol<S>) << "step router weights";
  }
  worst.print(fs::path(h5).stem().string() + " " + cas + " " + dtype_name<S>() + " (cached decode vs HF recompute)");
}

// Negative control: attention that ignores the indexer's selection must be caught by the oracle (every
// model here has rows with more causal keys than top_k).
void dense_control_case(const std::string& h5, const std::string& cas) {
  Loaded L;
  if (!load(h5, L)) return;
  H5File h(h5);
  ref::ModelOptions o;
  o.dense_attention = true;
  ref::Model<double> m(*L.f, L.c, o);
  std::vector<int32_t> ids = h.read_i32("/" + cas + "/input_ids");
  ASSERT_GT(static_cast<int64_t>(ids.size()), L.c.indexer_top_k) << "the control needs T > top_k";
  ref::Mat<double> lg = m.forward(ids);
  std::vector<double> got(static_cast<size_t>(lg.size()));
  for (Eigen::Index r = 0, k = 0; r < lg.rows(); ++r)
    for (Eigen::Index q = 0; q < lg.cols(); ++q) got[static_cast<size_t>(k++)] = lg(r, q);
  const double e = nmse(got, h.read_f64("/" + cas + "/logits"));
  std::printf("[ nmse ] dense attention (indexer ignored) %s %s logits %.3e\n", fs::path(h5).stem().c_str(),
              cas.c_str(), e);
  EXPECT_GT(e, 1e-3) << "the HF oracle must catch attention that ignores the indexer";
}

// Negative control for the staleness check: an oracle file whose recorded sha256 does not match what its
// synth command produces must be refused with the explanation, never compared.
void stale_synth_case(const std::string& h5) {
  const fs::path dir = fs::temp_directory_path() / ("mlaconf_hf_stale_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string fake = (dir / "stale.h5").string();
  std::string cmd = root_attr(h5, "synth_cmd");
  cmd.replace(cmd.find("--seed "), 7, "--seed 1");  // another seed: other bytes
  {
    hid_t f = H5Fcreate(fake.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    auto put = [&](const char* name, const std::string& v) {
      hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, v.size() + 1);
      hid_t sp = H5Screate(H5S_SCALAR);
      hid_t a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, t, v.c_str());
      H5Aclose(a);
      H5Sclose(sp);
      H5Tclose(t);
    };
    put("synth_cmd", cmd);
    put("gguf_sha256", root_attr(h5, "gguf_sha256"));
    put("label", "stale_control");
    H5Fclose(f);
  }
  std::string why;
  const std::string got = model_for(fake, &why);
  std::error_code ec;
  fs::remove_all(dir, ec);
  EXPECT_EQ(got, "") << "a stale oracle was accepted";
  EXPECT_NE(why.find("no longer reproduces"), std::string::npos) << why;
}


struct Registrar {
  Registrar() {
    std::vector<fs::path> files;
    if (fs::is_directory(kDataDir))
      for (const auto& e : fs::directory_iterator(kDataDir))
        if (e.path().extension() == ".h5") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      register_case("hf", "hf_oracle(files=none)", [] { GTEST_SKIP() << "skipped: no HF oracle files in " << kDataDir; });
      return;
    }
    // The smallest model is the cheapest to re-synthesize for the staleness control.
    const fs::path smallest = *std::min_element(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
      return fs::file_size(a) < fs::file_size(b);
    });
    register_case("hf", "negative_stale_synth(model=" + smallest.stem().string() + ")", [h5 = smallest.string()] { stale_synth_case(h5); });
    for (const fs::path& p : files) {
      const std::string h5 = p.string(), model = p.stem().string();
      for (const std::string& cas : root_groups(h5)) {
        if (cas.rfind("prompt", 0) == 0) {
          register_case("hf", "hf_forward(model=" + model + ",case=" + cas + ",dtype=f64)", [h5, cas] { forward_case<double>(h5, cas); });
          register_case("hf", "hf_forward(model=" + model + ",case=" + cas + ",dtype=f32)", [h5, cas] { forward_case<float>(h5, cas); });
          register_case("hf", "negative_dense_attention(model=" + model + ",case=" + cas + ")", [h5, cas] { dense_control_case(h5, cas); });
        } else if (cas.rfind("greedy", 0) == 0) {
          register_case("hf", "hf_greedy(model=" + model + ",case=" + cas + ",dtype=f64)", [h5, cas] { greedy_case<double>(h5, cas); });
          register_case("hf", "hf_greedy(model=" + model + ",case=" + cas + ",dtype=f32)", [h5, cas] { greedy_case<float>(h5, cas); });
        }
      }
    }
  }
} registrar;

}  // namespace
}  // namespace mlaconf::test
