// The model both `mlaconf kld` modes run: the GGUF, its config and its tokenizer, opened and checked once.
#pragma once
#include <string>

#include "core/gguf.h"
#include "core/model_config.h"
#include "tokenizer/tokenizer.h"

namespace mlaconf::cli {

struct KldModel {
  GgufFile f;
  ModelConfig c;
  tok::Tokenizer tk;
};

// Opens `path` (checked a regular file first: --model); InputError when the tokenizer has more tokens
// than the model's vocabulary (an id past the logits row).
KldModel open_kld_model(const std::string& path);

}  // namespace mlaconf::cli
