// Test helper: what the CLI trial suites share on top of cli_trial.h: the CLI under test, its inputs (a
// tiny model and fixtures made once per build folder), a scratch folder per trial, the contract of a
// refused trial, and fixture edits through h5py.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "suites/robustness/cli_trial.h"

namespace mlaconf::trial {

// MLACONF_TRIAL_CLI runs the trials against another build (e.g. an older one, to see them fail); else the
// mlaconf of this build (MLACONF_CLI).
const std::string& cli();
bool have_cli();

// Made once per build folder (the first test process to get the lock): m.gguf (synth --seed 1) and three
// fixtures of the same 16 random tokens: e.h5 (f64 with op-level datasets), f32.h5, model_level.h5.
const std::string& data_dir();

// A fresh folder for one trial, with the shared inputs linked (or copied) in; removed at the end.
struct Scratch {
  std::string dir;
  explicit Scratch(const std::vector<std::string>& inputs = {"m.gguf", "e.h5"});
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::string p(const std::string& n) const { return dir + "/" + n; }
  // Its own copy (to modify without touching the shared file).
  std::string own(const std::string& n) const;
};

// The contract for a refused trial: exit `code`, one stderr line with the right prefix that contains
// `says`, and the folder exactly as it was (`before`, from snapshot()).
void expect_refused(const Result& r, int code, const std::string& says, const std::string& dir,
                    const std::map<std::string, std::string>& before);

// Each command of `commands` run (its command line the trace), refused as expect_refused says, within
// `max_seconds` of wall time when that is above 0.
void expect_each_refused(const std::vector<std::vector<std::string>>& commands, int code, const std::string& says,
                         const std::string& dir, const std::map<std::string, std::string>& before,
                         const Options& o = {}, double max_seconds = 0);

// Runs python `code` on `file` opened r+ with h5py, `c` bound to its first case group's name (python3-h5py,
// ci/deps.sh: the C++ writer makes only valid files). False when that fails (no h5py: the caller skips).
bool h5py_edit(const std::string& file, const std::string& code);

}  // namespace mlaconf::trial

#define NEED_CLI() \
  if (!::mlaconf::trial::have_cli()) GTEST_SKIP() << "skipped: " << ::mlaconf::trial::cli() << " not built"
