// `mlaconf inspect` through the CLI binary (MLACONF_CLI): the text report, the --json document, the
// --tensor --stats object whose keys scripts depend on, and the header-only speed on a 447 GB split.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/gguf.h"
#include "reference/dequant/dequant.h"
#include "suites/core/gguf_bytes.h"
#include "suites/core/synth_files.h"
#include "synth/synth.h"

namespace mlaconf {
namespace {
using testing_synth::run_cmd;

std::string cli() { return MLACONF_CLI; }

bool have_python_json() { return std::system("/usr/bin/python3 -c 'import json' >/dev/null 2>&1") == 0; }

// Runs python on the JSON in `json`, printing the sorted top-level keys, comma-separated.
std::string json_keys(const std::string& json) {
  const std::string dir = testing_gguf::scratch_dir("json");
  { std::ofstream(dir + "/doc.json") << json; }
  auto r = run_cmd("/usr/bin/python3 -c \"import json,sys; d=json.load(open(sys.argv[1])); "
                   "print(','.join(sorted(d.keys())))\" " + dir + "/doc.json");
  std::filesystem::remove_all(dir);
  if (r.status != 0) return "INVALID JSON: " + r.err;
  while (!r.out.empty() && (r.out.back() == '\n' || r.out.back() == '\r')) r.out.pop_back();
  return r.out;
}

TEST(inspect, text_report_lists_config_and_every_tensor) {
  if (!std::filesystem::exists(cli())) GTEST_SKIP() << "skipped: " << cli() << " not built";
  auto r = run_cmd(cli() + " inspect " + testing_synth::tiny_seed11());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("glm-dsa.block_count"), std::string::npos);
  EXPECT_NE(r.out.find("[string x 2048]"), std::string::npos) << "long arrays summarised";
  EXPECT_NE(r.out.find("MLA"), std::string::npos) << "the config summary";
  EXPECT_NE(r.out.find("verdict   OK"), std::string::npos);
  GgufFile f = GgufFile::open(testing_synth::tiny_seed11());
  for (const TensorInfo& t : f.tensors()) EXPECT_NE(r.out.find(t.name + " "), std::string::npos) << t.name;
}

TEST(inspect, shared_tiny_model) {
  const std::string p = std::string(MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.gguf";
  if (!std::filesystem::exists(p)) GTEST_SKIP() << "skipped: " << p << " not present";
  if (!std::filesystem::exists(cli())) GTEST_SKIP() << "skipped: " << cli() << " not built";
  auto r = run_cmd(cli() + " inspect " + p);
  ASSERT_EQ(r.status, 0) << r.err;
  GgufFile f = GgufFile::open(p);
  for (const TensorInfo& t : f.tensors()) EXPECT_NE(r.out.find(t.name + " "), std::string::npos) << t.name;
  EXPECT_NE(r.out.find("verdict   OK"), std::string::npos);
}

TEST(inspect, json_document_keys) {
  if (!std::filesystem::exists(cli())) GTEST_SKIP() << "skipped: " << cli() << " not built";
  if (!have_python_json()) GTEST_SKIP() << "not supported: no /usr/bin/python3 to parse JSON";
  auto r = run_cmd(cli() + " inspect --json " + testing_synth::tiny_seed11());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json_keys(r.out), "config,file,metadata,shards,tensors,total_file_size,validation,version");
}

TEST(inspect, stats_json_keys_and_values) {
  if (!std::filesystem::exists(cli())) GTEST_SKIP() << "skipped: " << cli() << " not built";
  if (!have_python_json()) GTEST_SKIP() << "not supported: no /usr/bin/python3 to parse JSON";
  const std::string name = "blk.1.ffn_down_exps.weight";  // Q6_K, 3-D
  auto r = run_cmd(cli() + " inspect --json --tensor " + name + " --stats " + testing_synth::tiny_seed11());
  if (r.status == 2 && r.err.find("cannot dequantize") != std::string::npos)
    GTEST_SKIP() << "not supported: " << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json_keys(r.out), "max,mean,min,name,rms,shape,type");
  EXPECT_NE(r.out.find("\"name\": \"" + name + "\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"type\": \"Q6_K\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"shape\": [256, 512, 16]"), std::string::npos) << r.out;
  // The printed rms equals the rms of the whole tensor dequantized in process, to the last digits (the
  // JSON number round-trips; 9 significant digits were printed before issue 13).
  GgufFile f = GgufFile::open(testing_synth::tiny_seed11());
  std::vector<float> v = ref::dequantize_tensor(f.tensor(name));
  double sq = 0;
  for (float x : v) sq += double(x) * x;
  const double rms = std::sqrt(sq / v.size());
  const auto pos = r.out.find("\"rms\": ");
  ASSERT_NE(pos, std::string::npos);
  EXPECT_NEAR(std::stod(r.out.substr(pos + 7)), rms, 1e-13 * rms);
}

TEST(inspect, missing_tensor_is_bad_input) {
  if (!std::filesystem::exists(cli())) GTEST_SKIP() << "skipped: " << cli() << " not built";
  auto r = run_cmd(cli() + " inspect --tensor no.such.tensor --stats " + testing_synth::tiny_seed11());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("no.such.tensor"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(testing_synth::tiny_seed11()), std::string::npos) << r.err;
}

TEST(inspect, glm5_split_header_only_under_a_second) {
  if (!std::filesystem::exists(cli())) GTEST_SKIP() << "skipped: " << cli() << " not built";
  const std::string dir = testing_gguf::scratch_dir("inspect-glm5");
  auto s = run_cmd(cli() + " synth --preset glm5 --split 8 --header-only --out " + dir + "/glm5.gguf");
  ASSERT_EQ(s.status, 0) << s.err;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_cmd(cli() + " inspect " + dir + "/glm5-00003-of-00008.gguf");
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("78 run (79 blocks, 1 MTP)"), std::string::npos);
  EXPECT_NE(r.out.find("blk.77.ffn_down_exps.weight"), std::string::npos);
  EXPECT_LT(sec, 1.0) << "inspect of a 447 GB split took " << sec << " s";
  std::printf("[ measured ] mlaconf inspect of the header-only GLM-5 split (8 shards): %.3f s wall\n", sec);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mlaconf
