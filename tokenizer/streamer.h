// mlaconf tokenizer: incremental detokenization for streaming generation.
//
//   TextStreamer s(tok);
//   for (int32_t id : generated) std::cout << s.push(id) << std::flush;
//   std::cout << s.flush();
//
// push() returns the text that is final after this token: always well-formed UTF-8, possibly empty
// when the token ends inside a multi-byte character (an emoji split over byte tokens is held back
// until its last byte arrives). Bytes that can never complete are replaced by U+FFFD per maximal
// subpart (tokenizer/utf8.h), decided as soon as the next byte shows it. flush() ends the stream:
// a held incomplete character becomes one U+FFFD. So the concatenation of every push() and the
// final flush() equals tokenizer.decode(all ids) exactly, however the ids are split.
#pragma once
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace mlaconf::tok {

class TextStreamer {
 public:
  // `tok` must outlive the streamer. opt.special = false drops control tokens (eos, ...) from the text.
  explicit TextStreamer(const Tokenizer& tok, DecodeOptions opt = {}) : tok_(&tok), opt_(opt) {}

  // InputError for an id outside the vocabulary.
  std::string push(int32_t id) { return dec_.feed(tok_->token_bytes(id, opt_)); }
  std::string flush() { return dec_.finish(); }
  // Bytes held back (0..3): a character begun but not finished.
  size_t pending_bytes() const { return dec_.pending(); }

 private:
  const Tokenizer* tok_;
  DecodeOptions opt_;
  Utf8StreamDecoder dec_;
};

}  // namespace mlaconf::tok
