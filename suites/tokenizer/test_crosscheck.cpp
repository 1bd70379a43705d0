// Independent cross-checks through /usr/bin/python3 (hf_crosscheck.py): Hugging Face `tokenizers`
// for the ids, Python `regex` for the pre-tokenizer split, Python's bytes.decode("utf-8", "replace")
// for the invalid-UTF-8 policy. Each skips with the reason when the module is missing.
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "core/gguf.h"
#include "corpus.h"
#include "tok_test_util.h"
#include "tokenizer/utf8.h"

namespace {

using mlaconf::tok::Tokenizer;

std::string python() { return tokt::file_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }

// Runs the script; returns false (and the reason) when it exits 3 (a module missing).
bool run_script(const std::string& mode, const std::string& gguf, const std::vector<std::string>& inputs,
                std::vector<std::string>* lines, std::string* skip_reason) {
  static int serial = 0;
  std::string in = tokt::temp_path("xc_in_" + std::to_string(++serial) + ".txt");
  std::string out = tokt::temp_path("xc_out_" + std::to_string(serial) + ".txt");
  std::string err = tokt::temp_path("xc_err_" + std::to_string(serial) + ".txt");
  {
    std::ofstream f(in);
    for (const auto& s : inputs) f << "x" << tokt::to_hex(s) << "\n";
  }
  std::string oracle = tokt::file_exists(tokt::tiny_oracle_path()) ? tokt::tiny_oracle_path() : "";
  std::string cmd = python() + " " + tokt::shell_quote(std::string(MLACONF_TOK_SUITE_DIR) + "/hf_crosscheck.py") + " " +
                    mode + " " + tokt::shell_quote(gguf) + " " + tokt::shell_quote(in) + " " + tokt::shell_quote(out) +
                    " " + tokt::shell_quote(oracle) + " 2>" + tokt::shell_quote(err);
  int rc = 0;
  tokt::run_command(cmd, &rc);
  std::ifstream ef(err);
  std::stringstream es;
  es << ef.rdbuf();
  if (rc == 3 || rc == 127) {
    *skip_reason = "skipped: python cross-check unavailable: " + es.str();
    return false;
  }
  EXPECT_EQ(rc, 0) << cmd << "\n" << es.str();
  std::ifstream of(out);
  std::string line;
  while (std::getline(of, line)) lines->push_back(line);
  EXPECT_EQ(lines->size(), inputs.size());
  return rc == 0 && lines->size() == inputs.size();
}

std::vector<std::string> corpus_texts() {
  std::vector<std::string> v;
  for (const auto& e : tokt::awkward_corpus()) v.push_back(e.text);
  // The oracle-style prose and a few more mixes.
  v.push_back("The old lighthouse keeper");
  v.push_back("Hello, world! 123456789 times\n\n\tDone. <|user|>ok</s>");
  return v;
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::istringstream in(s);
  int32_t v;
  while (in >> v) ids.push_back(v);
  return ids;
}

// The synthetic vocabulary relabelled "llama-bpe": same split, but whole pieces found in the
// vocabulary skip BPE (ignore_merges), checked against HF's BPE(ignore_merges=True).
const Tokenizer& llama_bpe_variant(std::string* path) {
  static std::string p;
  static std::unique_ptr<Tokenizer> t;
  if (!t) {
    auto src = mlaconf::GgufFile::open(tokt::synthetic_gguf_path(2048));
    p = tokt::write_tokenizer_copy(src, "xc_llama_bpe.gguf",
        {{"tokenizer.ggml.pre", false, [](mlaconf::GgufWriter& w) { w.set_string("tokenizer.ggml.pre", "llama-bpe"); }}});
    t = std::make_unique<Tokenizer>(Tokenizer::from_gguf_path(p));
  }
  *path = p;
  return *t;
}

void check_hf_encode(const std::string& which) {
  if (which == "glm_dsa_tiny" && !tokt::tiny_tokenizer()) GTEST_SKIP() << "skipped: ../shared absent";
  std::string gguf;
  const Tokenizer* tp = nullptr;
  if (which == "glm_dsa_tiny") {
    gguf = tokt::tiny_gguf_path();
    tp = tokt::tiny_tokenizer();
  } else if (which == "synthetic_2048") {
    gguf = tokt::synthetic_gguf_path(2048);
    tp = &tokt::synthetic_tokenizer(2048);
  } else {
    tp = &llama_bpe_variant(&gguf);
  }
  const Tokenizer& t = *tp;
  std::vector<std::string> texts = corpus_texts();
  std::vector<std::string> lines;
  std::string reason;
  if (!run_script("encode", gguf, texts, &lines, &reason)) {
    if (!reason.empty()) GTEST_SKIP() << reason;
    return;
  }
  int n_ids = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    size_t bar = lines[i].find('|');
    ASSERT_NE(bar, std::string::npos);
    std::vector<int32_t> hf = parse_ids(lines[i].substr(0, bar));
    std::string hf_text = tokt::from_hex(lines[i].substr(bar + 1));
    std::vector<int32_t> ours = t.encode(texts[i]);
    n_ids += static_cast<int>(ours.size());
    EXPECT_EQ(ours, hf) << "text " << tokt::escaped(texts[i]) << "\nours " << tokt::ids_string(ours) << "\nHF   "
                        << tokt::ids_string(hf);
    EXPECT_EQ(t.decode(hf), hf_text) << tokt::escaped(texts[i]);
  }
  testing::Test::RecordProperty("ids_compared", n_ids);
}

// Negative control: the same vocabulary with the GPT-2 split ("gpt-2") must differ from HF's glm4 ids
// on some corpus entry, so the encode cross-check can see a wrong pre-tokenizer.
void check_hf_negative() {
  std::vector<std::string> texts = corpus_texts();
  std::vector<std::string> lines;
  std::string reason;
  if (!run_script("encode", tokt::synthetic_gguf_path(2048), texts, &lines, &reason)) {
    if (!reason.empty()) GTEST_SKIP() << reason;
    return;
  }
  auto src = mlaconf::GgufFile::open(tokt::synthetic_gguf_path(2048));
  std::string p = tokt::write_tokenizer_copy(src, "xc_wrong_pre.gguf",
      {{"tokenizer.ggml.pre", false, [](mlaconf::GgufWriter& w) { w.set_string("tokenizer.ggml.pre", "gpt-2"); }}});
  Tokenizer wrong = Tokenizer::from_gguf_path(p);
  int differ = 0;
  for (size_t i = 0; i < texts.size(); ++i)
    differ += wrong.encode(texts[i]) != parse_ids(lines[i].substr(0, lines[i].find('|')));
  EXPECT_GT(differ, 3) << "a wrong split regex went unnoticed";
}

void check_regex_split() {
  const Tokenizer& t = tokt::synthetic_tokenizer(2048);  // pre glm4
  std::vector<std::string> texts = corpus_texts();
  std::vector<std::string> lines;
  std::string reason;
  if (!run_script("split", "-", texts, &lines, &reason)) {
    if (!reason.empty()) GTEST_SKIP() << reason;
    return;
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<std::string> py;
    std::stringstream ss(lines[i]);
    std::string h;
    while (std::getline(ss, h, ',')) py.push_back(tokt::from_hex(h));
    std::vector<std::string> ours;
    for (auto p : t.pretokenizer().split(texts[i])) ours.emplace_back(p);
    // Special tokens are cut out before the split in encode(), not here: compare the raw split.
    EXPECT_EQ(ours, py) << "text " << tokt::escaped(texts[i]);
  }
}

void check_utf8_python() {
  std::mt19937 rng(20261129);
  std::vector<std::string> inputs;
  // Random strings over a byte alphabet rich in lead/continuation/invalid bytes.
  const std::vector<uint8_t> alphabet = {0x41, 0x20, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0,
                                         0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF};
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    for (int k = 0; k < 1 + i % 12; ++k) s.push_back(static_cast<char>(alphabet[pick(rng)]));
    inputs.push_back(s);
  }
  std::vector<std::string> lines;
  std::string reason;
  if (!run_script("utf8", "-", inputs, &lines, &reason)) {
    if (!reason.empty()) GTEST_SKIP() << reason;
    return;
  }
  int bad = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string want = tokt::from_hex(lines[i]);
    if (mlaconf::tok::sanitize_utf8(inputs[i]) != want && ++bad <= 5)
      ADD_FAILURE() << tokt::escaped(inputs[i]) << ": ours " << tokt::escaped(mlaconf::tok::sanitize_utf8(inputs[i]))
                    << " python " << tokt::escaped(want);
  }
  EXPECT_EQ(bad, 0);
}

const bool registered = [] {
  tokt::register_case("TokenizerCrossCheck", "hf_crosscheck(tokenizer=glm_dsa_tiny,what=encode_decode)",
                      [] { check_hf_encode("glm_dsa_tiny"); });
  tokt::register_case("TokenizerCrossCheck", "hf_crosscheck(tokenizer=synthetic_2048,what=encode_decode)",
                      [] { check_hf_encode("synthetic_2048"); });
  tokt::register_case("TokenizerCrossCheck", "hf_crosscheck(tokenizer=synthetic_2048_llama_bpe,what=encode_decode)",
                      [] { check_hf_encode("synthetic_2048_llama_bpe"); });
  tokt::register_case("TokenizerCrossCheck", "hf_crosscheck_negative(tokenizer=synthetic_2048,variant=pre_gpt2)",
                      check_hf_negative);
  tokt::register_case("TokenizerCrossCheck", "regex_crosscheck(pre=glm4)", check_regex_split);
  tokt::register_case("TokenizerCrossCheck", "utf8_crosscheck(impl=python_replace,n=3000)", check_utf8_python);
  return true;
}();

}  // namespace
