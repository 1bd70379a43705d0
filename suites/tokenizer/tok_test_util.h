// suites/tokenizer: shared helpers (paths, temp files, test registration, subprocesses, hex).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace tokt {

std::string shared_dir();
std::string tiny_gguf_path();   // ../shared/models/glm-dsa-tiny.gguf
std::string tiny_oracle_path();  // ../shared/models/glm-dsa-tiny.oracle.h5
bool file_exists(const std::string& p);

// The tiny model's tokenizer, loaded once; nullptr when ../shared is absent.
const mlaconf::tok::Tokenizer* tiny_tokenizer();
// A tokenizer built by add_synthetic_tokenizer(n_vocab), written to a temp GGUF once per n_vocab.
const mlaconf::tok::Tokenizer& synthetic_tokenizer(int64_t n_vocab);
std::string synthetic_gguf_path(int64_t n_vocab);

// A fresh file path in this process's temp folder (removed at exit).
std::string temp_path(const std::string& name);

// Writes a GGUF holding the tokenizer.* keys (and general.architecture) of `src`, each edit either
// removing its key or replacing it through `set`. Used to build damaged or altered tokenizers.
struct KeyEdit {
  std::string key;
  bool remove = false;
  std::function<void(mlaconf::GgufWriter&)> set;  // when !remove
};
std::string write_tokenizer_copy(const mlaconf::GgufFile& src, const std::string& name, const std::vector<KeyEdit>& edits);

// Runs a shell command; returns stdout, sets *rc to its exit status.
std::string run_command(const std::string& cmd, int* rc);
std::string shell_quote(const std::string& s);

std::string to_hex(const std::string& s);
std::string from_hex(const std::string& h);
// "[1, 2, 3]" for messages.
std::string ids_string(const std::vector<int32_t>& ids);
// Printable rendering of arbitrary bytes for messages.
std::string escaped(const std::string& s);

// Registers a test whose name is a canonical case name.
void register_case(const std::string& suite, const std::string& name, std::function<void()> body);

}  // namespace tokt
