// mlaconf tokenizer: a real, deterministic byte-level BPE vocabulary for synthesized models.
//
// Layout of the n_vocab tokens (like glm-dsa-tiny.gguf):
//   [0, 256)                 the 256 byte tokens, spelled in GPT-2's byte alphabet, in code point order
//   [256, 256 + m)           one token per merge, trained on kTrainingText below (glm4 split), then on
//                            case variants of its words and the numbers 0..999
//   [256 + m, n_vocab - 10)  "<|reserved_K|>" control tokens, only when the text runs out of merges
//   [n_vocab - 10, n_vocab)  GLM's special tokens: <|endoftext|> [MASK] [gMASK] [sMASK] <sop> <eop>
//                            <|system|> <|user|> <|assistant|> <|observation|> (control)
// Ids as in the tiny model: bos = [gMASK], eos = unknown = padding = <|endoftext|>, eot = <|user|>,
// eom = <|observation|>; add_bos_token false; pre "glm4".
//
// Training: the classic BPE loop. Every step merges the adjacent pair with the highest count over the
// pre-tokenized text; equal counts go to the pair whose (left, right) spellings sort first bytewise.
// No hashing order, clock or randomness enters, so the same n_vocab always gives the same bytes.
#include "tokenizer/synthetic_vocab.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/gguf_writer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace mlaconf::tok {

namespace {

// Original prose written for this purpose: plain English so that frequent words become single
// tokens, with some digits, punctuation, contractions and line breaks so those are exercised too.
constexpr const char* kTrainingText = R"TXT(The lighthouse stood at the end of the long stone pier, and every evening the keeper climbed the stairs to light the lamp.
He had done it for thirty years, and he knew every step by the sound it made under his boots.
The town below was small. There was a baker, a school, a church with a green roof, and a market that opened on Saturday mornings.
People said the keeper was a quiet man, but that was not quite true: he talked to the sea, to the gulls, and to the old radio on his table.

In the winter of 1987 the storms came early. The first one arrived in October, when the boats were still out, and it did not stop for three days.
The keeper kept the light burning all night and all day. He counted the ships that passed: 12 on the first night, 7 on the second, and only 2 on the third.
When the wind finally dropped, the harbour was full of broken wood and the beach was covered with seaweed and glass.

"It's the worst I've seen," said the baker, who had walked down to the pier with a basket of bread.
"You'll have seen worse," the keeper answered. "You're younger than the pier, and the pier has seen everything."
They laughed, and they shared the bread, and they watched the water turn from grey to blue as the clouds moved away.

The children of the town liked to visit the lighthouse after school. They asked the same questions every time:
How high is the tower? How far can the light be seen? What happens if the lamp goes out?
The keeper gave the same answers every time, because the answers were true: the tower is 41 metres high, the light can be seen for 20 miles,
and the lamp does not go out, because someone is always there to look after it.

One spring a young woman came to the town to study the birds that lived on the cliffs. She had a notebook, a pair of glasses for watching,
and a small machine that recorded the songs of the birds. She stayed in a room above the bakery and walked to the cliffs every morning at 5:30.
She counted the nests, measured the eggs, and wrote down the weather. In the evenings she climbed the stairs of the lighthouse and talked with the keeper
about the birds, the tides, the stars, and the history of the coast. He showed her the old log books, where every keeper before him had written the time,
the wind, the state of the sea, and the names of the ships that passed. The oldest book was from 1852, and its pages were brown and soft.

"Why do you write it all down?" she asked him one night.
"Because the next keeper will want to know," he said. "And because writing it down makes it real. If I don't write it, it didn't happen."
She thought about that for a long time. Then she took out her own notebook and showed him her numbers: 318 nests, 1,204 eggs, 96 days of rain.
"Then we are doing the same work," she said, "you with the ships and I with the birds."

Years later, when the light was made automatic and the keeper moved to a small house near the market, the log books went to the museum in the city.
The young woman, who was not so young any more, wrote a book about the birds of the coast. On the first page she thanked the keeper,
the baker, the children of the town, and the sea. People who read the book said it was really a book about paying attention:
to the weather, to the water, to the small things that change from day to day, and to the people who notice them.

The lighthouse still stands at the end of the pier. The lamp turns every night, and the light can still be seen for 20 miles.
Nobody climbs the stairs in the evening any more, but the children of the town still ask the same questions, and their parents still know the answers.
)TXT";

constexpr int64_t kTextWeight = 8;

constexpr const char* kGlmSpecials[10] = {"<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>",
                                          "<eop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"};

}  // namespace

void add_synthetic_tokenizer(GgufWriter& w, int64_t n_vocab) {
  constexpr int64_t kSpecial = 10;
  if (n_vocab < 256 + kSpecial)
    throw InputError("synthetic tokenizer: n_vocab = " + std::to_string(n_vocab) +
                     " is too small: it needs 256 byte tokens and 10 special tokens (n_vocab >= 266)");
  if (n_vocab > (int64_t{1} << 30)) throw InputError("synthetic tokenizer: n_vocab = " + std::to_string(n_vocab) + " is absurd");
  const size_t n_regular = static_cast<size_t>(n_vocab - kSpecial);

  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::unordered_map<std::string, int32_t> index;
  auto add_token = [&](const std::string& s, int32_t type) {
    index.emplace(s, static_cast<int32_t>(tokens.size()));
    tokens.push_back(s);
    types.push_back(type);
  };
  // Byte tokens in code point order of their spelling (the order a trained HF ByteLevel BPE has).
  std::vector<uint8_t> bytes(256);
  for (int b = 0; b < 256; ++b) bytes[b] = static_cast<uint8_t>(b);
  std::sort(bytes.begin(), bytes.end(), [](uint8_t a, uint8_t b) { return byte_to_codepoint(a) < byte_to_codepoint(b); });
  for (uint8_t b : bytes) add_token(byte_to_symbol(b), 1);

  // Pre-tokenize and count words; each word is a sequence of token ids.
  PreTokenizer pre = PreTokenizer::from_name("glm4");
  std::map<std::string, int64_t> counts;
  for (std::string_view piece : pre.split(kTrainingText)) counts[std::string(piece)] += kTextWeight;
  // More material, once the text itself is learnt: each lowercase word also capitalized, without its
  // leading space and in capitals, and the numbers 0..999 (the glm4 split cuts digits in threes), as
  // real vocabularies have them. Weight 1, so the text's own merges come first.
  std::vector<std::string> words_seen;
  for (const auto& [piece, c] : counts) words_seen.push_back(piece);
  for (const std::string& piece : words_seen) {
    size_t off = piece[0] == ' ' ? 1 : 0;
    std::string core = piece.substr(off);
    if (core.size() < 2 || !std::all_of(core.begin(), core.end(), [](char ch) { return ch >= 'a' && ch <= 'z'; })) continue;
    std::string cap = core, upper = core;
    cap[0] = static_cast<char>(cap[0] - 'a' + 'A');
    for (char& ch : upper) ch = static_cast<char>(ch - 'a' + 'A');
    for (const std::string& v : {" " + cap, cap, core, " " + upper}) counts[v] += 1;
  }
  for (int k = 0; k < 1000; ++k) counts[std::to_string(k)] += 1;
  struct Word {
    std::vector<int32_t> syms;
    int64_t count;
  };
  std::vector<Word> words;
  for (const auto& [text, c] : counts) {
    Word wd{{}, c};
    for (char ch : text) wd.syms.push_back(index.at(byte_to_symbol(static_cast<uint8_t>(ch))));
    words.push_back(std::move(wd));
  }

  // Pair counts are kept up to date incrementally: a merge only re-counts the words it touched.
  auto key_of = [](int32_t l, int32_t r) { return (static_cast<uint64_t>(l) << 32) | static_cast<uint32_t>(r); };
  std::unordered_map<uint64_t, int64_t> pair_count;
  auto count_pairs = [&](const Word& wd, int64_t sign) {
    for (size_t i = 0; i + 1 < wd.syms.size(); ++i) pair_count[key_of(wd.syms[i], wd.syms[i + 1])] += sign * wd.count;
  };
  for (const Word& wd : words) count_pairs(wd, +1);

  std::vector<std::string> merges;
  while (tokens.size() < n_regular) {
    uint64_t best = 0;
    int64_t best_count = 0;
    for (auto it = pair_count.begin(); it != pair_count.end();) {
      if (it->second <= 0) {  // pairs that no longer occur
        it = pair_count.erase(it);
        continue;
      }
      const auto [key, c] = *it;
      ++it;
      if (c < best_count) continue;
      if (c == best_count) {
        const std::string &l = tokens[key >> 32], &r = tokens[key & 0xFFFFFFFFu];
        const std::string &bl = tokens[best >> 32], &br = tokens[best & 0xFFFFFFFFu];
        if (std::tie(l, r) >= std::tie(bl, br)) continue;
      }
      best = key;
      best_count = c;
    }
    if (best_count == 0) break;  // every word is one token: the material has no more to teach
    int32_t left = static_cast<int32_t>(best >> 32), right = static_cast<int32_t>(best & 0xFFFFFFFFu);
    std::string merged = tokens[left] + tokens[right];
    merges.push_back(tokens[left] + " " + tokens[right]);
    auto found = index.find(merged);
    int32_t id = found != index.end() ? found->second : static_cast<int32_t>(tokens.size());
    if (found == index.end()) add_token(merged, 1);
    for (Word& wd : words) {
      bool has = false;
      for (size_t i = 0; i + 1 < wd.syms.size() && !has; ++i) has = wd.syms[i] == left && wd.syms[i + 1] == right;
      if (!has) continue;
      count_pairs(wd, -1);
      std::vector<int32_t> out;
      out.reserve(wd.syms.size());
      for (size_t i = 0; i < wd.syms.size(); ++i) {
        if (i + 1 < wd.syms.size() && wd.syms[i] == left && wd.syms[i + 1] == right) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(wd.syms[i]);
        }
      }
      wd.syms = std::move(out);
      count_pairs(wd, +1);
    }
  }
  for (size_t k = 0; tokens.size() < n_regular; ++k) add_token("<|reserved_" + std::to_string(k) + "|>", 3);
  for (const char* s : kGlmSpecials) add_token(s, 3);

  const uint32_t n = static_cast<uint32_t>(n_vocab);
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "glm4");
  w.set_array_string("tokenizer.ggml.tokens", tokens);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  w.set_array_string("tokenizer.ggml.merges", merges);
  w.set_u32("tokenizer.ggml.eos_token_id", n - 10);      // <|endoftext|>
  w.set_u32("tokenizer.ggml.padding_token_id", n - 10);  // <|endoftext|>
  w.set_u32("tokenizer.ggml.bos_token_id", n - 8);       // [gMASK]
  w.set_u32("tokenizer.ggml.eot_token_id", n - 3);       // <|user|>
  w.set_u32("tokenizer.ggml.eom_token_id", n - 1);       // <|observation|>
  w.set_u32("tokenizer.ggml.unknown_token_id", n - 10);  // <|endoftext|>
  w.set_bool("tokenizer.ggml.add_bos_token", false);
}

}  // namespace mlaconf::tok
