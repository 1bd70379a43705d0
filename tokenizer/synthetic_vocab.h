// mlaconf tokenizer: the byte-level BPE vocabulary that `mlaconf synth` embeds in a synthesized model,
// so that a synthesized GGUF carries a real tokenizer (tokenizer.ggml.*) like a downloaded one.
#pragma once
#include <cstdint>

namespace mlaconf {
class GgufWriter;
}

namespace mlaconf::tok {

// Writes tokenizer.ggml.{model,pre,tokens,token_type,merges,bos/eos/... ids,add_bos_token} for a
// vocabulary of exactly n_vocab tokens (n_vocab >= 256 + number of special tokens).
void add_synthetic_tokenizer(GgufWriter& w, int64_t n_vocab);

}  // namespace mlaconf::tok
