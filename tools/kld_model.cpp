// The model of a `mlaconf kld` run (kld_model.h).
#include "tools/kld_model.h"

#include "core/error.h"
#include "tools/validate.h"

namespace mlaconf::cli {

KldModel open_kld_model(const std::string& path) {
  require_regular_file(path, "--model");
  GgufFile f = GgufFile::open(path);
  ModelConfig c = ModelConfig::from_gguf(f);
  tok::Tokenizer tk = tok::Tokenizer::from_gguf(f);
  if (tk.n_vocab() > c.n_vocab)
    throw InputError(path + ": the tokenizer has " + std::to_string(tk.n_vocab()) + " tokens, more than the model's vocabulary (" +
                     std::to_string(c.n_vocab) + ")");
  return {std::move(f), std::move(c), std::move(tk)};
}

}  // namespace mlaconf::cli
