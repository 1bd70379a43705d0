// suites/quant: reference/dequant against PyPI gguf's numpy dequantizer (gguf.quants.dequantize) on
// random blocks of every type mlaconf dequantizes (random bytes, f16 scale fields forced finite and sane).
//
// gguf-py is an independent implementation (numpy, its own encoding of the IQ grids), so agreement here
// checks both our unpacking and our transcription of the tables. ggml's goldens stay the bit-exact
// authority. Measured (gguf 0.19.0, numpy float32 arithmetic): gguf-py agrees with mlaconf to 0 ulps on
// all 23 types, i.e. it follows ggml's float operation order everywhere, so the tolerance is 0 bits.
// Should a future gguf-py round differently by construction, give that type a bound in ulps below,
// with the reason.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/ggml_types.h"
#include "reference/dequant/dequant.h"
#include "suites/quant/float_compare.h"
#include "suites/quant/grid_sweep.h"
#include "suites/quant/random_blocks.h"
#include "suites/quant/register_case.h"

namespace mlaconf::test {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kValues = 256 * 64;  // per type: 64 super-blocks' worth
constexpr uint32_t kSeed = 20261129;

// Measured worst case of |mlaconf - gguf-py| in float ulps over these blocks, and why it is not 0.
struct Bound {
  int64_t max_ulps;
  const char* why;
};
const std::map<GgmlType, Bound>& bounds() {
  static const std::map<GgmlType, Bound> b = {};  // none needed: all measured at 0 ulps
  return b;
}

// One comparison: a type and a block set ("random", or "grid_sweep": every grid entry once).
struct Dataset {
  GgmlType type;
  bool sweep;
  std::string key() const { return std::string(type_name(type)) + (sweep ? ".sweep" : ""); }
  std::string case_name() const {
    return std::string("dequant_gguf_py(type=") + type_name(type) + (sweep ? ",blocks=grid_sweep)" : ")");
  }
  std::vector<uint8_t> blocks() const {
    const uint32_t seed = kSeed + static_cast<uint32_t>(type);
    return sweep ? grid_sweep_blocks(type, seed) : random_blocks(type, kValues / traits(type).block_size, seed);
  }
};

std::vector<Dataset> all_datasets() {
  std::vector<Dataset> d;
  for (GgmlType t : weight_types()) d.push_back({t, false});
  for (GgmlType t : weight_types())
    if (grid_entries(t) > 0) d.push_back({t, true});
  return d;
}

struct PyRun {
  bool available = false;
  std::string reason;
  std::map<std::string, std::vector<uint8_t>> blocks;
  std::map<std::string, std::vector<float>> values;
  std::map<std::string, std::string> errors;
};

// The datasets whose cases this run executes (ctest runs one case per process, so only that one is
// sent to python).
std::vector<Dataset> selected_datasets() {
  std::vector<Dataset> out;
  const testing::UnitTest& ut = *testing::UnitTest::GetInstance();
  for (const Dataset& d : all_datasets()) {
    bool run = false;
    for (int i = 0; i < ut.total_test_suite_count() && !run; ++i) {
      const testing::TestSuite& ts = *ut.GetTestSuite(i);
      for (int j = 0; j < ts.total_test_count() && !run; ++j)
        run = ts.GetTestInfo(j)->should_run() && d.case_name() == ts.GetTestInfo(j)->name();
    }
    if (run) out.push_back(d);
  }
  return out;
}

// One python3 process for all selected datasets (numpy + gguf import once), cached for every case.
const PyRun& py_run() {
  static PyRun run;
  static std::once_flag once;
  std::call_once(once, [] {
    const fs::path dir = fs::temp_directory_path() / ("mlaconf-quant-ggufpy-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::string cmd = "/usr/bin/python3 " + std::string(MLACONF_SOURCE_DIR) + "/suites/quant/gguf_py_dequant.py " +
                      dir.string();
    const std::vector<Dataset> sets = selected_datasets();
    for (const Dataset& d : sets) {
      std::vector<uint8_t>& b = run.blocks[d.key()] = d.blocks();
      std::ofstream(dir / (d.key() + ".bin"), std::ios::binary)
          .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
      cmd += " " + d.key();
    }
    cmd += " 2>" + (dir / "stderr.txt").string();
    const int rc = std::system(cmd.c_str());
    if (rc != 0) {
      run.reason = "python3 gguf_py_dequant.py exited with status " + std::to_string(rc);
      std::ifstream err(dir / "stderr.txt");
      std::string line;
      if (std::getline(err, line)) run.reason += ": " + line;
    } else {
      run.available = true;
      for (const Dataset& d : sets) {
        const std::string key = d.key();
        if (fs::exists(dir / (key + ".err"))) {
          std::ifstream e(dir / (key + ".err"));
          std::getline(e, run.errors[key]);
          continue;
        }
        const int64_t n = static_cast<int64_t>(run.blocks[key].size()) / traits(d.type).type_size *
                          traits(d.type).block_size;
        std::vector<float> v(static_cast<size_t>(n));
        std::ifstream in(dir / (key + ".f32"), std::ios::binary);
        in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
        if (in.gcount() == static_cast<std::streamsize>(v.size() * sizeof(float))) run.values[key] = std::move(v);
        else run.errors[key] = "short output";
      }
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
  });
  return run;
}

void gguf_py_case(const Dataset& d) {
  const GgmlType t = d.type;
  const PyRun& run = py_run();
  if (!run.available) GTEST_SKIP() << "not supported: PyPI gguf not importable (" << run.reason << ")";
  if (auto e = run.errors.find(d.key()); e != run.errors.end())
    GTEST_SKIP() << "not supported: gguf-py cannot dequantize " << type_name(t) << ": " << e->second;
  const std::vector<float>& want = run.values.at(d.key());
  std::vector<float> got(want.size());
  ref::dequantize(t, run.blocks.at(d.key()).data(), got.data(), static_cast<int64_t>(got.size()));
  int64_t nonzero = 0;
  for (float v : got) nonzero += v != 0.0f;
  ASSERT_GT(nonzero, static_cast<int64_t>(got.size()) / 2) << "blocks decoded to mostly zeros";
  const BitCompare r = compare_bits(got.data(), want.data(), static_cast<int64_t>(got.size()));
  const auto b = bounds().find(t);
  const int64_t allowed = b == bounds().end() ? 0 : b->second.max_ulps;
  std::printf("[ measured ] %s vs gguf-py: %lld of %lld values differ, max %lld ulps (allowed %lld)\n",
              d.case_name().c_str(), static_cast<long long>(r.mismatches), static_cast<long long>(r.n),
              static_cast<long long>(r.max_ulps), static_cast<long long>(allowed));
  if (allowed == 0) {
    EXPECT_TRUE(r.exact()) << type_name(t) << ": " << r.mismatches << " of " << r.n << " differ from gguf-py (max "
                           << r.max_ulps << " ulps; tolerance 0 bits):" << r.first;
  } else {
    EXPECT_LE(r.max_ulps, allowed) << type_name(t) << " (" << b->second.why << "):" << r.first;
  }
}

bool register_all() {
  for (const Dataset& d : all_datasets()) register_case("quant", d.case_name(), [d] { gguf_py_case(d); });
  return true;
}

const bool registered = register_all();

}  // namespace
}  // namespace mlaconf::test
