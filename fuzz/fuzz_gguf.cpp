// libFuzzer target for the GGUF parser: every input is written to a temporary file and opened the way
// `mlaconf inspect` opens a model (parse, ModelConfig, validate_weights), then every tensor's first and
// last byte is touched through the mapping. InputError is the expected outcome for bad input; anything
// else (a crash, a sanitizer report, another exception) is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "fuzz/scratch_file.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/weight_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Negative control for ci/fuzz.sh: with MLACONF_FUZZ_SELFTEST set, an input starting "CRASH" crashes,
  // so the script's crash path can be checked (it must exit non-zero).
  static const bool selftest = std::getenv("MLACONF_FUZZ_SELFTEST") != nullptr;
  if (selftest && size >= 5 && std::memcmp(data, "CRASH", 5) == 0) __builtin_trap();
  const std::string& p = mlaconf::fuzz::write_scratch(data, size, ".gguf");
  try {
    mlaconf::GgufFile g = mlaconf::GgufFile::open(p);
    volatile uint8_t sink = 0;
    for (const mlaconf::TensorInfo& t : g.tensors()) {
      (void)t.shape_string();
      if (t.nbytes) sink = sink + t.data[0] + t.data[t.nbytes - 1];
    }
    for (const auto& [k, v] : g.metadata()) (void)v.to_string();
    mlaconf::ModelConfig c = mlaconf::ModelConfig::from_gguf(g);
    (void)c.summary();
    (void)c.to_json();
    mlaconf::validate_weights(g, c);
  } catch (const mlaconf::InputError&) {
    // expected for bad input
  }
  return 0;
}
