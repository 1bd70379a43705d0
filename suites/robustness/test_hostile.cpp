// Bad input (issue 2 item 7): every file of the hostile corpus (hostile_corpus.cpp, made by code) must
// give an InputError naming the file and the problem, in process, and through `mlaconf inspect` exit
// code 2 with exactly one error line on stderr and no crash. The valid model the corpus is cut from is
// the negative control: it must pass both ways.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "suites/common/case_registry.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/weight_layout.h"
#include "suites/core/gguf_bytes.h"
#include "suites/core/synth_files.h"
#include "suites/robustness/hostile_corpus.h"

namespace mlaconf {
namespace {

std::string g_dir;  // scratch folder of this process

// Writes the case (and its sibling shards) into a folder of its own; returns the main file's path.
std::string materialize(const hostile::Case& c) {
  std::string dir = g_dir + "/" + std::to_string(std::hash<std::string>{}(c.name));
  std::filesystem::create_directories(dir);
  for (const auto& [name, bytes] : c.siblings) testing_gguf::write_bytes(dir + "/" + name, bytes);
  const std::string p = dir + "/" + c.file;
  testing_gguf::write_bytes(p, c.bytes);
  return p;
}

// Opens as the CLI does: parse, config, weights.
void open_fully(const std::string& p) {
  GgufFile f = GgufFile::open(p);
  ModelConfig c = ModelConfig::from_gguf(f);
  validate_weights(f, c);
}

void check_in_process(const hostile::Case& c) {
  const std::string p = materialize(c);
  try {
    open_fully(p);
    ADD_FAILURE() << c.name << ": accepted";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_TRUE(hostile::matches(m, c.expect)) << "error '" << m << "' does not say '" << c.expect << "'";
    EXPECT_NE(m.find(std::filesystem::path(p).parent_path().string()), std::string::npos) << "error does not name the file: " << m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.name << ": not an InputError: " << e.what();
  }
}

void check_cli(const hostile::Case& c) {
  if (!std::filesystem::exists(MLACONF_CLI)) GTEST_SKIP() << "skipped: " << MLACONF_CLI << " not built";
  const std::string p = materialize(c);
  auto r = testing_synth::run_cmd(std::string(MLACONF_CLI) + " inspect '" + p + "'");
  ASSERT_FALSE(r.signaled) << "crashed";
  EXPECT_EQ(r.status, 2) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one error line:\n" << r.err;
  EXPECT_EQ(r.err.rfind("mlaconf: error: ", 0), 0u) << r.err;
  EXPECT_TRUE(hostile::matches(r.err, c.expect)) << "error '" << r.err << "' does not say '" << c.expect << "'";
  EXPECT_NE(r.err.find(std::filesystem::path(p).parent_path().string()), std::string::npos) << "error does not name the file: " << r.err;
}


}  // namespace
}  // namespace mlaconf

int main(int argc, char** argv) {
  using namespace mlaconf;
  ::testing::InitGoogleTest(&argc, argv);
  g_dir = testing_gguf::scratch_dir("hostile");
  const std::vector<uint8_t> valid = hostile::small_valid_model();
  static const std::vector<hostile::Case> cases = hostile::corpus(valid);
  for (const hostile::Case& c : cases) {
    mlaconf::test::register_case("hostile", c.name, [&c] { check_in_process(c); });
    mlaconf::test::register_case("hostile_cli", c.name, [&c] { check_cli(c); });
  }
  // Negative control: the untouched model passes both ways.
  mlaconf::test::register_case("hostile", "valid_model_accepted", [valid] {
    hostile::Case c{"valid", "valid.gguf", valid, "", {}};
    EXPECT_NO_THROW(open_fully(materialize(c)));
  });
  mlaconf::test::register_case("hostile_cli", "valid_model_accepted", [valid] {
    if (!std::filesystem::exists(MLACONF_CLI)) GTEST_SKIP() << "skipped: " << MLACONF_CLI << " not built";
    hostile::Case c{"valid", "valid.gguf", valid, "", {}};
    auto r = testing_synth::run_cmd(std::string(MLACONF_CLI) + " inspect " + materialize(c));
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(r.err.empty()) << r.err;
  });
  mlaconf::test::register_case("hostile", "corpus_covers_every_kind", [] {
    // The kinds issue 2 item 7 names, each present at least once.
    for (const char* k : {"truncated", "bad_magic", "version_", "absurd_tensor_count", "absurd_kv_count", "absurd_key_length",
                          "absurd_array_length", "tensor_data_past_eof", "overlapping_offsets", "misaligned_offset",
                          "unknown_ggml_type", "ne0_not_multiple", "duplicate_tensor_name", "dims_product_overflow",
                          "shape_inconsistent", "missing_key"}) {
      bool found = false;
      for (const auto& c : cases) found |= c.name.find(k) != std::string::npos;
      EXPECT_TRUE(found) << k;
    }
    EXPECT_GT(cases.size(), 150u);
  });
  int rc = RUN_ALL_TESTS();
  std::filesystem::remove_all(g_dir);
  return rc;
}
