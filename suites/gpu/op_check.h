// suites/gpu: how an op-level GPU case is judged, and what it leaves behind when it fails.
//
// Like a CUTLASS testbed, each case computes its expected result with the reference's own functions
// (reference/ops.h, mla.h, indexer.h, dequant) and judges the kernel's output with the fixtures judge
// (fx::judge_tensor of fixtures/compare.h: the per-tensor comparison `compare` runs, the bounds of the
// dataset name's tolerance class at the kernel's arithmetic precision). A case that fails writes a reproducer,
//   $MLACONF_REPRO_DIR (default ./repro) / <canonical case name>.h5
// holding its inputs, each judged tensor's expected and actual values, the worst positions and the
// verdicts (HDF5, readable with h5py; written atomically), and prints the one command that re-runs
// exactly that case: '<this binary>' --gtest_filter='<suite>.<case>'. (The file is not a fixture of
// fixtures/SCHEMA.md, so `mlaconf compare` does not read it.)
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fixtures/h5io.h"
#include "fixtures/tolerances.h"

namespace mlaconf::gputest {

// $MLACONF_REPRO_DIR, else "repro" (relative to the working directory).
std::string repro_dir();
// '<absolute path of this binary>' --gtest_filter='<suite>.<case>' for the running gtest case.
std::string rerun_command();
// <suite>.<case> of the running gtest case.
std::string current_case();

// Arrays for inputs (converted on demand: only a failing case writes them).
fx::Array f64_array(std::vector<int64_t> shape, const std::vector<double>& v);
fx::Array f32_array(std::vector<int64_t> shape, const std::vector<float>& v);
fx::Array f16_array(std::vector<int64_t> shape, const std::vector<uint16_t>& bits);  // as f32 values (exact)
fx::Array i32_array(std::vector<int64_t> shape, const std::vector<int32_t>& v);
fx::Array u8_array(std::vector<int64_t> shape, const std::vector<uint8_t>& v);

class OpCheck {
 public:
  // dir: where a failure's reproducer goes ("" = repro_dir()).
  explicit OpCheck(std::string dir = "");

  // An input of the case; `make` runs only when a reproducer is written (captures must outlive that).
  void input(const std::string& name, std::function<fx::Array()> make);
  // actual judged against expected (the reference function's result) by fx::judge_tensor: the class of
  // the dataset name (tolerances.h: "indexer_scores" scores, "logits" logits, any other name activation)
  // at `precision`.
  bool tensor(const std::string& name, const std::string& precision, const std::vector<int64_t>& shape,
              const std::vector<double>& expected, const std::vector<double>& actual);
  // Exactly equal values (ids; or floats bit for bit: -0 vs +0 and NaN payloads count).
  bool exact(const std::string& name, const std::vector<int64_t>& shape, const std::vector<int32_t>& expected,
             const std::vector<int32_t>& actual);
  bool bits(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& expected,
            const std::vector<float>& actual);

  bool pass() const { return failures_ == 0; }
  // One line per judged tensor ("out: pass nmse 1.2e-14 ..."), for the log.
  const std::string& summary() const { return summary_; }
  // When a check failed: writes the reproducer and returns its path (else ""). Idempotent.
  std::string write_repro();

 private:
  struct Judged {
    Judged(std::string n, std::string c) : name(std::move(n)), cls(std::move(c)) {}
    // The failing tensor's values for the reproducer (actual kept flat where its size differs).
    void keep(fx::Dtype dt, const std::vector<int64_t>& shape, std::vector<double> e, std::vector<double> a);
    std::string name, cls, note;
    fx::Array expected, actual;
    std::vector<int64_t> worst;     // flat positions, worst first
    std::vector<double> worst_err;  // |actual - expected| there (inf: a non-finite mismatch)
  };
  void add(Judged j, bool ok);
  std::string dir_, written_, summary_;
  std::vector<std::pair<std::string, std::function<fx::Array()>>> inputs_;
  std::vector<Judged> judged_;
  int failures_ = 0;
};

// The end of a normal op case: prints the summary; on a failure writes the reproducer, prints its path
// and the re-run command, and fails the gtest case with the notes.
void expect_pass(OpCheck& c);

}  // namespace mlaconf::gputest
