// The hostile GGUF corpus, made by code: every kind of damage issue 2 item 7 lists, each with the words
// its error must contain. Shared by the robustness suite (in process and through `mlaconf inspect`) and
// by the fuzzer's seed-corpus generator (fuzz/).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mlaconf::hostile {

struct Case {
  std::string name;                // canonical case name, e.g. "hostile(kind=truncated,at=123)"
  std::string file;                // file name to write it under (split cases use split names)
  std::vector<uint8_t> bytes;
  std::string expect;              // alternatives separated by '|': the error must contain one of them
  // Sibling files written next to it (other shards of a split model).
  std::vector<std::pair<std::string, std::vector<uint8_t>>> siblings;
};

// A small valid glm-dsa model (2 layers, hidden 64, mixed types), synthesized with seed 1.
std::vector<uint8_t> small_valid_model();

// The corpus, built around `valid` (small_valid_model()). `cuts` truncation points spread over the file.
std::vector<Case> corpus(const std::vector<uint8_t>& valid, int cuts = 96);

// True when `message` contains one of the '|'-separated alternatives of `expect`.
bool matches(const std::string& message, const std::string& expect);

}  // namespace mlaconf::hostile
