// Test helper: synthesized models shared by the tests of one process (written once, on first use).
#pragma once
#include <string>

#include "core/model_config.h"

namespace mlaconf::testing_synth {

// The embedded tiny model, seed 11, tiny type mix: one file.
const std::string& tiny_seed11();
// The same model written --header-only (sparse data: cheap; for metadata tests).
const std::string& tiny_header_only();
// The forcing suites' model: tiny dims, 4 layers with indexer types F F S F (layer 2 reuses layer 1's
// selection), top_k 8, seed 37 (`mlaconf synth --seed 37 --layers 4 --top-k 8 --indexer-types FFS`).
const std::string& tiny_ffs_seed37();

// Runs a shell command; returns its exit status (-1 if it did not exit normally) and its stdout and
// stderr (separately).
struct CmdResult {
  int status = -1;
  bool signaled = false;
  std::string out, err;
};
CmdResult run_cmd(const std::string& cmd);

// `want` as it reads back from a GGUF, as JSON: float hyperparameters are stored as f32, so they may
// differ from the double asked for by the f32 rounding (relative 1e-7); such fields are taken from `got`.
std::string as_stored(ModelConfig want, const ModelConfig& got);

}  // namespace mlaconf::testing_synth
