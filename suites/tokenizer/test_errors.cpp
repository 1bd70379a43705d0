// Unsupported or damaged tokenizers give a clear InputError naming the file and the key; nothing
// crashes. The damaged files are copies of a synthesized tokenizer (no ../shared needed).
#include "core/error.h"
#include "tok_test_util.h"
#include "tokenizer/synthetic_vocab.h"

namespace {

using mlaconf::GgufWriter;
using mlaconf::InputError;
using mlaconf::tok::Tokenizer;

struct ErrorCase {
  std::string name;
  std::vector<tokt::KeyEdit> edits;
  std::string expect;  // a fragment the message must contain
};

std::vector<std::string> tokens_of(const mlaconf::GgufFile& f) { return f.require("tokenizer.ggml.tokens").strings; }

std::vector<ErrorCase> error_cases(const mlaconf::GgufFile& src) {
  auto set_str = [](std::string k, std::string v) {
    return tokt::KeyEdit{k, false, [k, v](GgufWriter& w) { w.set_string(k, v); }};
  };
  std::vector<std::string> toks = tokens_of(src);
  std::vector<std::string> dup = toks;
  dup[300] = dup[301];
  std::vector<std::string> no_byte = toks;
  no_byte[0] = "<|not_a_byte|>";  // token 0 is the byte '!'
  std::vector<std::string> merges = src.require("tokenizer.ggml.merges").strings;
  std::vector<std::string> bad_merge = merges, bad_form = merges, bad_result = merges;
  bad_merge[5] = "\xC4\xA0 zzqqxx";
  bad_form[7] = "nospace";
  bad_result[9] = "q z";  // "qz" is not a token of this vocabulary
  std::vector<int32_t> short_types(toks.size() - 1, 1);
  return {
      {"model=llama", {set_str("tokenizer.ggml.model", "llama")}, "tokenizer model 'llama' (tokenizer.ggml.model) is not supported"},
      {"model=bert", {set_str("tokenizer.ggml.model", "bert")}, "is not supported"},
      {"pre=nonexistent", {set_str("tokenizer.ggml.pre", "nonexistent")}, "unsupported tokenizer.ggml.pre 'nonexistent'"},
      {"model=missing", {{"tokenizer.ggml.model", true, {}}}, "no tokenizer"},
      {"tokens=missing", {{"tokenizer.ggml.tokens", true, {}}}, "tokenizer.ggml.tokens"},
      {"tokens=duplicate", {{"tokenizer.ggml.tokens", false, [dup](GgufWriter& w) { w.set_array_string("tokenizer.ggml.tokens", dup); }}}, "twice"},
      {"tokens=missing_byte", {{"tokenizer.ggml.tokens", false, [no_byte](GgufWriter& w) { w.set_array_string("tokenizer.ggml.tokens", no_byte); }}}, "no token for byte 0x21"},
      {"token_type=short", {{"tokenizer.ggml.token_type", false, [short_types](GgufWriter& w) { w.set_array_i32("tokenizer.ggml.token_type", short_types); }}}, "tokenizer.ggml.token_type has"},
      {"tokens=wrong_type", {{"tokenizer.ggml.tokens", false, [](GgufWriter& w) { w.set_array_i32("tokenizer.ggml.tokens", {1, 2}); }}}, "expected an array of strings"},
      {"merges=unknown_part", {{"tokenizer.ggml.merges", false, [bad_merge](GgufWriter& w) { w.set_array_string("tokenizer.ggml.merges", bad_merge); }}}, "tokenizer.ggml.merges[5]"},
      {"merges=no_space", {{"tokenizer.ggml.merges", false, [bad_form](GgufWriter& w) { w.set_array_string("tokenizer.ggml.merges", bad_form); }}}, "is not of the form 'left right'"},
      {"merges=unknown_result", {{"tokenizer.ggml.merges", false, [bad_result](GgufWriter& w) { w.set_array_string("tokenizer.ggml.merges", bad_result); }}}, "is not in the vocabulary"},
      {"bos=out_of_range", {{"tokenizer.ggml.bos_token_id", false, [](GgufWriter& w) { w.set_u32("tokenizer.ggml.bos_token_id", 999999); }}}, "tokenizer.ggml.bos_token_id = 999999 is outside the vocabulary"},
      {"model=wrong_type", {{"tokenizer.ggml.model", false, [](GgufWriter& w) { w.set_u32("tokenizer.ggml.model", 2); }}}, "expected string"},
  };
}

void check_error(const std::string& name) {
  auto src = mlaconf::GgufFile::open(tokt::synthetic_gguf_path(2048));
  for (const auto& c : error_cases(src)) {
    if (c.name != name) continue;
    std::string p = tokt::write_tokenizer_copy(src, "bad_" + std::to_string(std::hash<std::string>{}(name)) + ".gguf", c.edits);
    try {
      Tokenizer t = Tokenizer::from_gguf_path(p);
      FAIL() << "loaded a tokenizer with " << name;
    } catch (const InputError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
      EXPECT_NE(msg.find(p), std::string::npos) << "the message should name the file: " << msg;
    }
    return;
  }
  FAIL() << "no case " << name;
}

void check_runtime_errors() {
  const Tokenizer& t = tokt::synthetic_tokenizer(2048);
  EXPECT_THROW(t.decode(std::vector<int32_t>{5, 2048}), InputError);
  EXPECT_THROW(t.decode(std::vector<int32_t>{-1}), InputError);
  EXPECT_THROW(t.token_bytes(1 << 30), InputError);
  // No bos in the file: --add-bos is an InputError, not a silent no-op.
  auto src = mlaconf::GgufFile::open(tokt::synthetic_gguf_path(2048));
  std::string p = tokt::write_tokenizer_copy(src, "no_bos.gguf", {{"tokenizer.ggml.bos_token_id", true, {}}});
  Tokenizer nb = Tokenizer::from_gguf_path(p);
  EXPECT_EQ(nb.bos_id(), -1);
  EXPECT_NO_THROW(nb.encode("hi"));
  EXPECT_THROW(nb.encode("hi", {.add_bos = true}), InputError);
  // The synthetic vocabulary refuses sizes that cannot hold bytes + specials.
  GgufWriter w;
  EXPECT_THROW(mlaconf::tok::add_synthetic_tokenizer(w, 265), InputError);
  EXPECT_THROW(mlaconf::tok::add_synthetic_tokenizer(w, -1), InputError);
  // A pre missing entirely falls back to llama.cpp's "default" split and still round-trips.
  std::string q = tokt::write_tokenizer_copy(src, "no_pre.gguf", {{"tokenizer.ggml.pre", true, {}}});
  Tokenizer np = Tokenizer::from_gguf_path(q);
  EXPECT_EQ(np.pre(), "default");
  EXPECT_EQ(np.decode(np.encode("It's 12345 o'clock, isn't it?!")), "It's 12345 o'clock, isn't it?!");
}

const bool registered = [] {
  for (const char* n : {"model=llama", "model=bert", "pre=nonexistent", "model=missing", "tokens=missing", "tokens=duplicate",
                        "tokens=missing_byte", "token_type=short", "tokens=wrong_type", "merges=unknown_part",
                        "merges=no_space", "merges=unknown_result", "bos=out_of_range", "model=wrong_type"})
    tokt::register_case("TokenizerErrors", std::string("tokenizer_error(") + n + ")", [n] { check_error(n); });
  tokt::register_case("TokenizerErrors", "tokenizer_error(runtime)", check_runtime_errors);
  return true;
}();

}  // namespace
