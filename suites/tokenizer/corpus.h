// suites/tokenizer: the corpus of awkward strings every round-trip, streaming and cross-check test runs.
#pragma once
#include <string>
#include <vector>

namespace tokt {

struct CorpusEntry {
  std::string name;  // canonical, used in case names: [a-z0-9_]
  std::string text;  // well-formed UTF-8
};

const std::vector<CorpusEntry>& awkward_corpus();

}  // namespace tokt
