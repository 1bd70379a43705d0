// Writes the fuzzer's seed corpus: the hostile corpus of suites/robustness (one file per case) and the
// valid small model it is cut from. Usage: fuzz_corpus_gen DIR
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <string>

#include "suites/core/gguf_bytes.h"
#include "suites/robustness/hostile_corpus.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::filesystem::create_directories(dir);
  const auto valid = mlaconf::hostile::small_valid_model();
  mlaconf::testing_gguf::write_bytes(dir + "/valid-small-model.gguf", valid);
  int n = 1;
  for (const auto& c : mlaconf::hostile::corpus(valid)) {
    std::string name = c.name;
    for (char& ch : name)
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    mlaconf::testing_gguf::write_bytes(dir + "/" + name, c.bytes);
    ++n;
  }
  std::printf("fuzz_corpus_gen: %d files in %s (valid model %zu bytes)\n", n, dir.c_str(), valid.size());
  return 0;
}
