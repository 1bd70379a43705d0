// Placeholder: 256 byte tokens, no merges, padding tokens; replaced by a trained vocabulary.
#include "tokenizer/synthetic_vocab.h"

#include <string>
#include <vector>

#include "core/gguf_writer.h"

namespace mlaconf::tok {

void add_synthetic_tokenizer(GgufWriter& w, int64_t n_vocab) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int64_t i = 0; i < n_vocab; ++i) {
    tokens.push_back("<tok" + std::to_string(i) + ">");
    types.push_back(1);
  }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "glm4");
  w.set_array_string("tokenizer.ggml.tokens", tokens);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  w.set_array_string("tokenizer.ggml.merges", {});
}

}  // namespace mlaconf::tok
