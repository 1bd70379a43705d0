// libFuzzer target for another engine's run (`kld --against RUN.json`, fixtures/engine_run.h): the file people
// send is parsed as kld reads it (JSON, then the three response shapes, the prompt's rows) over a vocabulary of
// 2048 ids whose texts are "t0".."t2047" plus one text two ids spell, and every parsed row is judged
// (topn_divergence) against a fixed logits row. InputError is the expected outcome for bad input; anything else
// (a crash, a sanitizer report, another exception) is a finding. Seeds: suites/kld_against/data.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "fixtures/engine_run.h"
#include "fixtures/logit_divergence.h"

namespace {
constexpr int64_t kVocab = 2048;

std::vector<int32_t> resolve(const std::string& piece) {
  if (piece == "twice") return {5, 6};  // an ambiguous text
  if (piece.size() < 2 || piece.size() > 5 || piece[0] != 't') return {};
  int64_t id = 0;
  for (size_t i = 1; i < piece.size(); ++i) {
    if (piece[i] < '0' || piece[i] > '9') return {};
    id = id * 10 + (piece[i] - '0');
  }
  return id < kVocab ? std::vector<int32_t>{static_cast<int32_t>(id)} : std::vector<int32_t>{};
}

const std::vector<double>& logits() {
  static const std::vector<double> row = [] {
    std::vector<double> r(kVocab);
    for (int64_t v = 0; v < kVocab; ++v) r[v] = 0.001 * static_cast<double>((v * 7919) % 2003) - 1.0;
    return r;
  }();
  return row;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const mlaconf::Json j = mlaconf::json_parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
    const mlaconf::EngineRun run = mlaconf::parse_engine_run(j, "fuzz.json", kVocab, resolve);
    volatile double sink = 0;
    for (const auto* rows : {&run.prompt_steps, &run.steps})
      for (const mlaconf::EngineStep& s : *rows) sink = sink + mlaconf::topn_divergence(logits().data(), kVocab, s.top).kld;
  } catch (const mlaconf::InputError&) {
    // expected for bad input
  }
  return 0;
}
