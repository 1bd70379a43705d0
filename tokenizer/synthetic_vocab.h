// mlaconf tokenizer: the byte-level BPE vocabulary that `mlaconf synth` embeds in a synthesized model,
// so that a synthesized GGUF carries a real tokenizer (tokenizer.ggml.*) like a downloaded one.
#pragma once
#include <cstdint>

namespace mlaconf {
class GgufWriter;
}

namespace mlaconf::tok {

// Writes tokenizer.ggml.{model,pre,tokens,token_type,merges,bos/eos/... ids,add_bos_token} for a
// vocabulary of exactly n_vocab tokens: 256 byte tokens, BPE merges trained deterministically on an
// embedded English text (common words become one token), control-token filler if the text runs out
// of merges, and GLM's 10 special tokens last (see synthetic_vocab.cpp). Throws InputError when
// n_vocab < 266. Deterministic: the same n_vocab always writes the same metadata.
void add_synthetic_tokenizer(GgufWriter& w, int64_t n_vocab);

}  // namespace mlaconf::tok
