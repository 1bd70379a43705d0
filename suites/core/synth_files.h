// Test helper: synthesized models shared by the tests of one process (written once, on first use).
#pragma once
#include <string>

namespace mlaconf::testing_synth {

// The embedded tiny model, seed 11, tiny type mix: one file.
const std::string& tiny_seed11();
// The same model written --header-only (sparse data: cheap; for metadata tests).
const std::string& tiny_header_only();

// Runs a shell command; returns its exit status (-1 if it did not exit normally) and its stdout and
// stderr (separately).
struct CmdResult {
  int status = -1;
  bool signaled = false;
  std::string out, err;
};
CmdResult run_cmd(const std::string& cmd);

}  // namespace mlaconf::testing_synth
