// `synth`: round trip through the reader (same config, tensor names / shapes / types / bytes), byte-for-
// byte determinism, llama.cpp's names, shapes, types and keys (against ../shared's real tiny GGUF),
// realistic magnitudes after dequantization, and a real-size GLM-5 split opened in well under a second.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/weight_layout.h"
#include "reference/dequant/dequant.h"
#include "suites/core/gguf_bytes.h"
#include "suites/core/synth_files.h"
#include "synth/synth.h"

namespace mlaconf {
namespace {


// The file holds exactly the planned tensors, in order, and the config it was made from.
void expect_round_trip(const synth::Options& o, const std::string& path) {
  GgufFile f = GgufFile::open(path);
  const auto planned = synth::plan(o);
  ASSERT_EQ(f.tensors().size(), planned.size());
  for (size_t k = 0; k < planned.size(); ++k) {
    const TensorInfo& t = f.tensors()[k];
    const synth::PlannedTensor& p = planned[k];
    EXPECT_EQ(t.name, p.spec.name);
    EXPECT_EQ(t.n_dims, p.spec.n_dims) << t.name;
    EXPECT_EQ(t.ne, p.spec.ne) << t.name;
    EXPECT_EQ(t.type, p.type) << t.name;
    EXPECT_EQ(t.nbytes, p.nbytes) << t.name;
  }
  ModelConfig c = ModelConfig::from_gguf(f);
  EXPECT_EQ(c.to_json(), testing_synth::as_stored(o.config, c));
  EXPECT_NO_THROW(validate_weights(f, c));
}

TEST(synth, round_trip_tiny) {
  synth::Options o;
  o.seed = 11;
  expect_round_trip(o, testing_synth::tiny_seed11());
}

TEST(synth, round_trip_custom_dims_and_types) {
  const std::string dir = testing_gguf::scratch_dir("synth-custom");
  synth::Options o;
  o.seed = 3;
  o.config = with_dims(o.config, {.layers = 3, .nextn = 1, .n_embd = 256, .n_head = 2, .q_lora = 128, .kv_lora = 256, .qk_nope = 96,
                                  .qk_rope = 32, .v_head = 64, .idx_heads = 4, .idx_dim = 64, .top_k = 16, .experts = 8,
                                  .experts_used = 2, .ff_exp = 256, .ff = 512, .vocab = 512, .dense_lead = 2, .groups = 4,
                                  .groups_used = 2, .indexer_types = "FSFS"});
  o.has_type_default = true;
  o.type_default = GgmlType::Q8_0;
  o.type_overrides = {{"attn_k_b", GgmlType::F16}, {"ffn_down_exps", GgmlType::Q2_K}, {"output.", GgmlType::Q6_K}};
  o.alignment = 64;
  const auto paths = synth::write_model(o, dir + "/custom.gguf");
  expect_round_trip(o, paths[0]);
  GgufFile f = GgufFile::open(paths[0]);
  EXPECT_EQ(f.tensor("blk.0.attn_k_b.weight").type, GgmlType::F16);
  EXPECT_EQ(f.tensor("blk.2.ffn_down_exps.weight").type, GgmlType::Q2_K);
  EXPECT_EQ(f.tensor("blk.0.attn_q_a.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(f.tensor("blk.0.attn_norm.weight").type, GgmlType::F32);  // norms stay F32 under --type-default
  EXPECT_EQ(f.find_tensor("blk.1.indexer.attn_k.weight"), nullptr);  // shared indexer layer: no weights
  EXPECT_NE(f.find_tensor("blk.2.indexer.attn_k.weight"), nullptr);
  EXPECT_EQ(f.shards()[0].alignment, 64u);
  std::filesystem::remove_all(dir);
}

TEST(synth, bad_options_are_input_errors) {
  synth::Options o;
  o.config.indexer_full = {true, true};  // 4 layers
  EXPECT_THROW(synth::plan(o), InputError);
  o = synth::Options();
  o.config.n_head = 0;
  EXPECT_THROW(synth::plan(o), InputError);
  o = synth::Options();
  o.alignment = 48;
  EXPECT_THROW(synth::plan(o), InputError);
  o = synth::Options();
  o.type_overrides = {{"attn_q_a", GgmlType::Q8_K}};  // not a weight type
  EXPECT_THROW(synth::plan(o), InputError);
  EXPECT_THROW(synth::preset("glm6"), InputError);
  EXPECT_NO_THROW(synth::plan(synth::Options()));  // control
}

TEST(synth, fallback_when_block_does_not_divide_ne0) {
  EXPECT_EQ(synth::fallback_type(GgmlType::Q4_K, 192), GgmlType::Q5_0);
  EXPECT_EQ(synth::fallback_type(GgmlType::Q5_K, 192), GgmlType::Q5_1);
  EXPECT_EQ(synth::fallback_type(GgmlType::Q6_K, 192), GgmlType::Q8_0);
  EXPECT_EQ(synth::fallback_type(GgmlType::IQ2_XXS, 96), GgmlType::IQ4_NL);
  EXPECT_EQ(synth::fallback_type(GgmlType::Q4_K, 48), GgmlType::F16);
  EXPECT_EQ(synth::fallback_type(GgmlType::Q4_K, 512), GgmlType::Q4_K);
}

TEST(synth, deterministic_bytes) {
  const std::string dir = testing_gguf::scratch_dir("synth-det");
  synth::Options o;
  o.seed = 11;
  synth::write_model(o, dir + "/again.gguf");
  const auto a = testing_gguf::read_bytes(testing_synth::tiny_seed11());
  const auto b = testing_gguf::read_bytes(dir + "/again.gguf");
  ASSERT_GT(a.size(), 1000000u);
  EXPECT_TRUE(a == b) << "same seed and options gave different bytes";
  // Negative control: another seed changes the data (and only the data and the name).
  o.seed = 12;
  synth::write_model(o, dir + "/other.gguf");
  const auto c = testing_gguf::read_bytes(dir + "/other.gguf");
  ASSERT_EQ(a.size(), c.size());
  size_t diff = 0;
  for (size_t k = 0; k < a.size(); ++k) diff += a[k] != c[k];
  EXPECT_GT(diff, a.size() / 2) << "seed 12 should change most bytes";
  std::filesystem::remove_all(dir);
}

TEST(synth, matches_llama_cpp_names_shapes_types_keys) {
  const std::string p = std::string(MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.gguf";
  if (!std::filesystem::exists(p)) GTEST_SKIP() << "skipped: " << p << " not present";
  GgufFile real = GgufFile::open(p);
  GgufFile ours = GgufFile::open(testing_synth::tiny_seed11());
  ASSERT_EQ(ours.tensors().size(), real.tensors().size());
  for (size_t k = 0; k < real.tensors().size(); ++k) {
    const TensorInfo& r = real.tensors()[k];
    const TensorInfo& s = ours.tensors()[k];
    EXPECT_EQ(s.name, r.name) << "tensor order differs at " << k;
    EXPECT_EQ(s.ne, r.ne) << r.name;
    EXPECT_EQ(s.n_dims, r.n_dims) << r.name;
    EXPECT_EQ(s.type, r.type) << r.name << ": the tiny type mix";
  }
  std::map<std::string, const GgufValue*> ours_kv;
  for (const auto& [k, v] : ours.metadata()) ours_kv[k] = &v;
  for (const auto& [k, v] : real.metadata()) {
    auto it = ours_kv.find(k);
    if (it == ours_kv.end()) {
      ADD_FAILURE() << "synth does not write key " << k;
      continue;
    }
    EXPECT_EQ(it->second->type, v.type) << k;
    if (v.is_array()) {
      EXPECT_EQ(it->second->elem_type, v.elem_type) << k;
    }
    // Hyperparameters must be equal too (the tiny default is the real tiny model's config).
    if (k.rfind("glm-dsa.", 0) == 0) {
      EXPECT_EQ(it->second->to_string(), v.to_string()) << k;
    }
    ours_kv.erase(it);
  }
  for (const auto& [k, v] : ours_kv) ADD_FAILURE() << "synth writes key " << k << " that llama.cpp's file lacks";
}

// Dequantized RMS about the centre vs. the distribution asked for; relative tolerance by sample size.
TEST(synth, realistic_magnitudes) {
  GgufFile f = GgufFile::open(testing_synth::tiny_seed11());
  const ModelConfig c = ModelConfig::from_gguf(f);
  int checked = 0;
  for (const TensorSpec& s : model_tensor_specs(c)) {
    const TensorInfo& t = f.tensor(s.name);
    if (!ref::can_dequantize(t.type)) continue;
    std::vector<float> v;
    try {
      v = ref::dequantize_tensor(t);
    } catch (const InputError& e) {
      continue;  // a dequantizer not written yet: the suite of reference/dequant reports it
    }
    const synth::ValueDist d = synth::value_dist(s, c);
    double sum = 0, sq = 0;
    bool finite = true;
    for (float x : v) {
      finite &= std::isfinite(x);
      sum += x;
      sq += (x - d.center) * (x - d.center);
    }
    ASSERT_TRUE(finite) << s.name;
    const double n = static_cast<double>(v.size());
    const double rms = std::sqrt(sq / n), want = d.rms_about_center();
    const double tol = n >= 16384 ? 0.05 : 0.25;  // relative, on the RMS about the centre
    EXPECT_NEAR(rms / want, 1.0, tol) << s.name << " (" << type_name(t.type) << "): rms " << rms << ", want " << want;
    EXPECT_NEAR(sum / n, d.center, 4 * want / std::sqrt(n) + 0.02 * want) << s.name << ": mean";
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "not supported: no dequantizer available yet";
  EXPECT_GE(checked, 80);
}

TEST(synth, magnitude_check_catches_a_wrong_scale) {
  // Negative control for the check above: a block filled for twice the spread is caught.
  synth::Rng rng(1);
  synth::ValueDist d;
  d.spread = 0.05;
  synth::ValueDist twice = d;
  twice.spread = 0.1;
  std::vector<uint8_t> blocks(144 * 64);
  synth::fill_blocks(GgmlType::Q4_K, twice, rng, blocks.data(), 64);
  std::vector<float> v(256 * 64);
  try {
    ref::dequantize(GgmlType::Q4_K, blocks.data(), v.data(), 256 * 64);
  } catch (const InputError& e) {
    GTEST_SKIP() << "not supported: Q4_K dequantizer: " << e.what();
  }
  double sq = 0;
  for (float x : v) sq += double(x) * x;
  const double rms = std::sqrt(sq / v.size());
  EXPECT_GT(std::fabs(rms / d.rms_about_center() - 1.0), 0.05) << "the 5% tolerance would not see a 2x scale";
  EXPECT_NEAR(rms / twice.rms_about_center(), 1.0, 0.05);
}

TEST(synth, glm5_header_only_split_opens_fast) {
  const std::string dir = testing_gguf::scratch_dir("glm5");
  synth::Options o;
  o.config = synth::preset("glm5");
  o.split = 8;
  o.header_only = true;
  const auto paths = synth::write_model(o, dir + "/glm5.gguf");
  ASSERT_EQ(paths.size(), 8u);
  uint64_t disk = 0;
  for (const auto& p : paths) {
    struct stat st {};
    ASSERT_EQ(stat(p.c_str(), &st), 0);
    disk += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  EXPECT_LT(disk, 64ull << 20) << "header-only shards should be sparse";
  const auto t0 = std::chrono::steady_clock::now();
  GgufFile f = GgufFile::open(paths[4]);
  ModelConfig c = ModelConfig::from_gguf(f);
  validate_weights(f, c);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(f.total_file_size(), 400ull * 1000 * 1000 * 1000) << "a real-size GLM-5 is over 400 GB at this mix";
  EXPECT_EQ(c.n_layer_run(), 78);
  EXPECT_EQ(c.n_expert, 256);
  EXPECT_EQ(f.tensor("blk.77.ffn_gate_exps.weight").ne, (std::array<int64_t, 4>{6144, 2048, 256, 1}));
  EXPECT_LT(s, 1.0) << "open + config + validate of a 447 GB split took " << s << " s";
  std::printf("[ measured ] open+config+validate of the %.1f GB GLM-5 split: %.3f s\n", f.total_file_size() / 1e9, s);
  std::filesystem::remove_all(dir);
}

// llama.cpp's own reader (PyPI gguf) reads the synthesized file: an independent parser.
TEST(synth, gguf_py_reads_it) {
  if (std::system("/usr/bin/python3 -c 'import gguf' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "not supported: PyPI gguf is not installed for /usr/bin/python3";
  const std::string dir = testing_gguf::scratch_dir("ggufpy");
  const std::string script = dir + "/check.py";
  {
    std::ofstream s(script);
    s << "import sys, gguf, numpy as np\n"
         "r = gguf.GGUFReader(sys.argv[1])\n"
         "for t in r.tensors:\n"
         "    print(t.name, t.tensor_type.name, ','.join(str(int(x)) for x in t.shape), int(t.n_bytes), int(t.data_offset))\n"
         "v = gguf.quants.dequantize(r.tensors[0].data, r.tensors[0].tensor_type)\n"
         "print('rms', float(np.sqrt(np.mean(v.astype(np.float64)**2))))\n";
  }
  auto r = testing_synth::run_cmd("/usr/bin/python3 " + script + " " + testing_synth::tiny_seed11());
  ASSERT_EQ(r.status, 0) << r.err;
  GgufFile f = GgufFile::open(testing_synth::tiny_seed11());
  std::istringstream in(r.out);
  for (const TensorInfo& t : f.tensors()) {
    std::string name, type, shape;
    uint64_t nbytes = 0, off = 0;
    ASSERT_TRUE(in >> name >> type >> shape >> nbytes >> off);
    std::string want_shape;
    for (int d = 0; d < t.n_dims; ++d) want_shape += (d ? "," : "") + std::to_string(t.ne[d]);
    EXPECT_EQ(name, t.name);
    EXPECT_EQ(type, type_name(t.type));
    EXPECT_EQ(shape, want_shape) << t.name;
    EXPECT_EQ(nbytes, t.nbytes) << t.name;
    EXPECT_EQ(off, f.shards()[0].data_offset + t.offset) << t.name;
  }
  std::string tag;
  double rms = 0;
  ASSERT_TRUE(in >> tag >> rms);
  EXPECT_NEAR(rms, 1.0, 0.05) << "token_embd N(0, 1) as gguf-py dequantizes it";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mlaconf
