// mlaconf <-> llama.cpp: answering a fixture by running llama.cpp on the fixture's own token ids.
//
// Each forward case of the fixture is one prefill in a fresh llama.cpp context (every row outputs
// logits, one ubatch); the fixture's decode cases that continue it (pos0 = the prefill's length, then +1
// each) are decoded one token at a time in the same context. Every graph node the eval callback sees is
// looked up in tools/llama_cpp/tensor_map.h; what maps onto a dataset the expected case holds is written,
// in a case of the expected case's name and kind (full_forward / decode_step: llama.cpp ran free, so its
// own indexer top-k and router ids are in the answer and compare attributes differing decisions).
// Names seen and not mapped are listed (root attribute llama_cpp_unmapped), never guessed.
#pragma once
#include <string>
#include <vector>

#include "core/model_config.h"
#include "fixtures/fixture_file.h"

namespace mlaconf::llamacpp {

struct AnswerOptions {
  std::string lib_dir;   // --llama-lib ("" = the llama_cpp package's)
  std::string filter;    // only this expected case (and, for a forward case, its decode steps)
  int threads = 2;
  int flash_attn = -1;   // -1 auto (llama.cpp's default), 0 off, 1 on: the two attention paths of its graph
  bool quiet = false;
  std::string python;    // the python3 asked for the llama_cpp package ("" = /usr/bin/python3, else the PATH's)
  bool log = false;      // llama.cpp's log lines to stderr
};

struct AnswerResult {
  fx::FixtureData data;              // cases only; the caller adds the model's root attributes
  std::string version;               // llama.cpp's, as the library reports it
  std::string lib_dir;
  std::vector<std::string> unmapped;   // "NAME-* (OP)" seen and not in the table
  std::vector<std::string> missing;    // "case: dataset" the expected case holds and llama.cpp exposed no node for
  size_t n_datasets = 0;
};

// Throws NotSupported (no llama.cpp, an unknown release, a model llama.cpp cannot load) and InputError.
AnswerResult answer_fixture(const fx::FixtureFile& E, const std::string& gguf, const ModelConfig& c, const AnswerOptions& o);

}  // namespace mlaconf::llamacpp
