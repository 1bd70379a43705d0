// `mlaconf tokenize`: ids (plain and --json), --add-bos, --ids decoding, and exit code 2 with a clear
// message for an unsupported tokenizer or a missing file.
#include "core/gguf.h"
#include "tok_test_util.h"

namespace {

std::string cli() { return MLACONF_CLI; }

#define NEED_CLI()                                                                           \
  do {                                                                                       \
    if (!tokt::file_exists(cli())) GTEST_SKIP() << "skipped: mlaconf not built at " << cli(); \
  } while (0)

std::string run(const std::string& args, int* rc) { return tokt::run_command(tokt::shell_quote(cli()) + " " + args + " 2>&1", rc); }

void check_json_tiny() {
  NEED_CLI();
  if (!tokt::tiny_tokenizer()) GTEST_SKIP() << "skipped: ../shared absent";
  int rc = 0;
  std::string m = tokt::shell_quote(tokt::tiny_gguf_path());
  // HF's ids for the oracle's prompt12 text (glm-dsa-tiny.oracle.h5 prompt12/input_ids).
  std::string out = run("tokenize --model " + m + " --text 'The old lighthouse keeper' --json", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "{\"ids\": [628, 293, 660, 362, 1618, 258, 312, 431, 220, 472, 68, 495]}\n");
  out = run("tokenize --model " + m + " --text 'The old lighthouse keeper' --json --add-bos", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "{\"ids\": [2040, 628, 293, 660, 362, 1618, 258, 312, 431, 220, 472, 68, 495]}\n");
  out = run("tokenize --model " + m + " --text 'The old lighthouse keeper'", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "628 293 660 362 1618 258 312 431 220 472 68 495\n");
}

void check_decode_and_specials() {
  NEED_CLI();
  int rc = 0;
  std::string m = tokt::shell_quote(tokt::synthetic_gguf_path(2048));
  std::string text = "<|user|>\nSnow \xE2\x9D\x84\xEF\xB8\x8F at 5:30, \"quoted\"\t\\ ok";
  std::string out = run("tokenize --model " + m + " --json --text " + tokt::shell_quote(text), &rc);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_EQ(out.rfind("{\"ids\": [2045, ", 0), 0u) << out;  // <|user|> is one id (n_vocab - 3)
  std::string ids = out.substr(std::string("{\"ids\": ").size());
  ids = ids.substr(0, ids.find('}'));
  std::string back = run("tokenize --model " + m + " --ids " + tokt::shell_quote(ids) + " --json", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(back, "{\"text\": \"<|user|>\\nSnow \xE2\x9D\x84\xEF\xB8\x8F at 5:30, \\\"quoted\\\"\\t\\\\ ok\"}\n");
  out = run("tokenize --model " + m + " --no-special --json --text '<|user|>'", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out.find("2045"), std::string::npos) << out;
}

void check_errors() {
  NEED_CLI();
  int rc = 0;
  auto src = mlaconf::GgufFile::open(tokt::synthetic_gguf_path(2048));
  std::string p = tokt::write_tokenizer_copy(src, "cli_bad_pre.gguf",
      {{"tokenizer.ggml.pre", false, [](mlaconf::GgufWriter& w) { w.set_string("tokenizer.ggml.pre", "klingon"); }}});
  std::string out = run("tokenize --model " + tokt::shell_quote(p) + " --text hi", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("unsupported tokenizer.ggml.pre 'klingon'"), std::string::npos) << out;
  std::string q = tokt::write_tokenizer_copy(src, "cli_bad_model.gguf",
      {{"tokenizer.ggml.model", false, [](mlaconf::GgufWriter& w) { w.set_string("tokenizer.ggml.model", "llama"); }}});
  out = run("tokenize --model " + tokt::shell_quote(q) + " --text hi", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("tokenizer model 'llama'"), std::string::npos) << out;
  out = run("tokenize --model /nonexistent/x.gguf --text hi", &rc);
  EXPECT_EQ(rc, 2) << out;
  out = run("tokenize --model " + tokt::shell_quote(tokt::synthetic_gguf_path(2048)) + " --ids '1 99999'", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("outside the vocabulary"), std::string::npos) << out;
}

// A model written by `mlaconf synth` carries a working tokenizer: text -> ids -> the same text.
void check_synth_roundtrip() {
  NEED_CLI();
  int rc = 0;
  std::string m = tokt::temp_path("cli_synth.gguf");
  std::string out = run("synth -o " + tokt::shell_quote(m), &rc);
  if (rc != 0) GTEST_SKIP() << "skipped: mlaconf synth did not run (exit " << rc << "): " << out;
  std::string text = "The keeper said: \"It's 1987.\" \xF0\x9F\x8C\x8A<|user|>";
  out = run("tokenize --model " + tokt::shell_quote(m) + " --text " + tokt::shell_quote(text), &rc);
  ASSERT_EQ(rc, 0) << out;
  std::string back = run("tokenize --model " + tokt::shell_quote(m) + " --ids " + tokt::shell_quote(out), &rc);
  ASSERT_EQ(rc, 0) << back;
  EXPECT_EQ(back, text + "\n");
}

const bool registered = [] {
  tokt::register_case("TokenizeCli", "cli_tokenize(model=glm_dsa_tiny,case=prompt12)", check_json_tiny);
  tokt::register_case("TokenizeCli", "cli_tokenize(model=synthetic_2048,case=decode_specials)", check_decode_and_specials);
  tokt::register_case("TokenizeCli", "cli_tokenize(case=errors)", check_errors);
  tokt::register_case("TokenizeCli", "cli_tokenize(model=synth_tiny,case=roundtrip)", check_synth_roundtrip);
  return true;
}();

}  // namespace
