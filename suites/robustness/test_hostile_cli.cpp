// Issue 38, own trials: the classes of the list tried where they had not been (planted files at
// every output and input, an output that is an input under another spelling, counts at their overflow
// edges, text from files reaching the terminal, fixtures of the right names and the wrong dtype or rank,
// a GGUF whose tensor data lies past its end). Each trial is a real `mlaconf` process in a folder of its
// own (trial_setup.h): exit code, one stderr line, nothing left behind, nothing overwritten, no hang.
// Trials that failed before their fix say so.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "suites/core/gguf_bytes.h"
#include "suites/robustness/cli_trial.h"
#include "suites/robustness/trial_setup.h"

namespace mlaconf {
namespace {
namespace fs = std::filesystem;
using trial::expect_refused;
using trial::h5py_edit;
using trial::Result;
using trial::Scratch;

const std::string& cli() { return trial::cli(); }

// No raw control character or byte that is not UTF-8 in `s` (newlines between lines allowed when
// `allow_newlines`): the check of everything that reaches a terminal. JSON output is checked by JSON's own
// rule (`json`: C0 controls escaped; a C1 control is a character JSON leaves as it is).
void expect_no_raw_control(const std::string& s, bool allow_newlines, const std::string& what, bool json = false) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n' && allow_newlines) continue;
    if (c == '\n' && i + 1 == s.size()) continue;  // the line's own end
    EXPECT_FALSE(c < 0x20 || c == 0x7f || c == 0xff) << what << ": raw byte " << int(c) << " at " << i << ": " << s;
  }
  if (!json) {
    EXPECT_EQ(s.find("\xc2\x9b"), std::string::npos) << what << ": a raw C1 control (CSI): " << s;
  }
}

// Control characters, a C1 CSI and a byte that is not UTF-8: a terminal title, a screen clear, a bell.
const std::string kNasty = "\x1b]0;pwned\x07\x1b[2J\nnext\r\xc2\x9bX\xff";

// A FIFO, a directory and a link to each, as "fifo", "dir", "fifo_link", "dir_link" in the scratch folder.
bool plant_special_files(const Scratch& s) {
  if (mkfifo(s.p("fifo").c_str(), 0644) != 0) return false;
  fs::create_directory(s.p("dir"));
  fs::create_symlink(s.p("fifo"), s.p("fifo_link"));
  fs::create_symlink(s.p("dir"), s.p("dir_link"));
  return true;
}

// ---- planted files at outputs -----------------------------------------------------------------------------
// synth --split checked only --out: a directory planted at shard 2's name was found at its rename, after
// the work, and shard 1 had by then replaced the file of its name and was removed again (a file the
// user had there was lost); a FIFO at a shard's name was replaced silently. Every shard name is now
// checked first, like every other output.
TEST(hostile_cli, synth_split_checks_every_shard_name_first) {
  NEED_CLI();
  Scratch s(std::vector<std::string>{});
  const std::string one = s.p("x-00001-of-00003.gguf"), two = s.p("x-00002-of-00003.gguf"), three = s.p("x-00003-of-00003.gguf");
  std::ofstream(one) << "the user's file";
  fs::create_directory(two);
  auto before = trial::snapshot(s.dir);
  Result r = trial::run({cli(), "synth", "--seed", "1", "--split", "3", "--out", s.p("x.gguf")});
  expect_refused(r, 2, "x-00002-of-00003.gguf: is a directory", s.dir, before);
  fs::remove(two);
  ASSERT_EQ(mkfifo(three.c_str(), 0644), 0);
  before = trial::snapshot(s.dir);
  trial::Options o;
  o.timeout_s = 30;
  r = trial::run({cli(), "synth", "--seed", "1", "--split", "3", "--out", s.p("x.gguf")}, o);
  expect_refused(r, 2, "x-00003-of-00003.gguf: is a FIFO", s.dir, before);
  fs::remove(three);
  fs::create_directory(s.p("d"));
  fs::create_symlink(s.p("d"), two);  // a link to a directory
  before = trial::snapshot(s.dir);
  r = trial::run({cli(), "synth", "--seed", "1", "--split", "3", "--out", s.p("x.gguf")});
  expect_refused(r, 2, "x-00002-of-00003.gguf: is a directory", s.dir, before);
  // Negative control: with the names free, the three shards appear (the old shard-1 file is replaced).
  fs::remove(two);
  r = trial::run({cli(), "synth", "--seed", "1", "--split", "3", "--out", s.p("x.gguf")});
  EXPECT_EQ(r.status, 0) << r.err;
  for (const std::string& p : {one, two, three}) EXPECT_TRUE(fs::is_regular_file(p)) << p;
}

// Every output option of every command against a FIFO, a directory and links to them: refused in one line
// before any work, nothing blocks, nothing changes.
TEST(hostile_cli, planted_special_files_at_every_output) {
  NEED_CLI();
  Scratch s({"m.gguf", "e.h5"});
  ASSERT_TRUE(plant_special_files(s));
  const auto before = trial::snapshot(s.dir);
  const std::string m = s.p("m.gguf"), e = s.p("e.h5");
  trial::Options o;
  o.timeout_s = 30;
  for (const auto& [name, says] : std::vector<std::pair<std::string, std::string>>{
           {"fifo", "FIFO"}, {"dir", "directory"}, {"fifo_link", "FIFO"}, {"dir_link", "directory"}}) {
    const std::string out = s.p(name);
    const std::vector<std::vector<std::string>> commands = {
        {cli(), "answer", e, "--model", m, "--quiet", "--out", out},
        {cli(), "capture", "--model", m, "--random-tokens", "16", "--seed", "1", "--decode-steps", "0", "--quiet", "--out", out},
        {cli(), "compare", e, e, "--json", out},
        {cli(), "compare", e, e, "--plot", out},
        {cli(), "synth", "--seed", "1", "--out", out},
    };
    trial::expect_each_refused(commands, 2, says, s.dir, before, o);
  }
}

// An output that is an input under another name: "./x", "../dir/x", a hard link, a symlink to it. Refused
// ("is the input"), the input untouched.
TEST(hostile_cli, output_is_an_input_under_another_spelling) {
  NEED_CLI();
  Scratch s({"m.gguf", "e.h5", "f32.h5"});
  fs::create_hard_link(s.p("e.h5"), s.p("e_hard.h5"));
  fs::create_symlink("e.h5", s.p("e_sym.h5"));
  fs::create_symlink("m.gguf", s.p("m_sym.gguf"));
  fs::create_symlink("f32.h5", s.p("f32_sym.h5"));
  const auto before = trial::snapshot(s.dir);
  const std::string base = fs::path(s.dir).filename().string();
  trial::Options o;
  o.cwd = s.dir;  // relative spellings
  const std::vector<std::string> e_aliases = {"./e.h5", "../" + base + "/e.h5", "e_hard.h5", "e_sym.h5", s.dir + "//e.h5"};
  for (const std::string& out : e_aliases) {
    SCOPED_TRACE(out);
    expect_refused(trial::run({cli(), "answer", "e.h5", "--model", "m.gguf", "--quiet", "--out", out}, o), 2, "is the input", s.dir, before);
    expect_refused(trial::run({cli(), "compare", "e.h5", "f32.h5", "--json", out}, o), 2, "is the input", s.dir, before);
    expect_refused(trial::run({cli(), "compare", "f32.h5", "e.h5", "--plot", out}, o), 2, "is the input", s.dir, before);
    expect_refused(trial::run({cli(), "capture", "--model", "m.gguf", "--random-tokens", "16", "--seed", "1", "--decode-steps", "0",
                               "--quiet", "--force-decisions", "e.h5", "--out", out},
                              o),
                   2, "is the input", s.dir, before);
  }
  for (const std::string& out : {std::string("./m.gguf"), std::string("m_sym.gguf"), "../" + base + "/m.gguf"}) {
    SCOPED_TRACE(out);
    expect_refused(trial::run({cli(), "answer", "e.h5", "--model", "m.gguf", "--quiet", "--out", out}, o), 2, "is the input", s.dir, before);
    expect_refused(trial::run({cli(), "capture", "--model", "m.gguf", "--random-tokens", "4", "--quiet", "--out", out}, o), 2,
                   "is the input", s.dir, before);
  }
  // compare's second input through a link.
  expect_refused(trial::run({cli(), "compare", "e.h5", "f32.h5", "--json", "f32_sym.h5"}, o), 2, "is the input", s.dir, before);
}

// An empty value given to an option whose empty value reads as "not given" (an unset shell variable in
// `--json "$OUT"`): compare wrote no report and exited 0, --bounds "" judged with the built-in bounds,
// capture --force-decisions "" captured without forcing. Each is a usage error now (exit 2, one line).
TEST(hostile_cli, empty_values_are_not_absent_options) {
  NEED_CLI();
  Scratch s({"m.gguf", "e.h5"});
  const auto before = trial::snapshot(s.dir);
  const std::string m = s.p("m.gguf"), e = s.p("e.h5");
  const std::vector<std::pair<std::vector<std::string>, std::string>> trials = {
      {{cli(), "compare", e, e, "--json", ""}, "--json"},
      {{cli(), "compare", e, e, "--plot", ""}, "--plot"},
      {{cli(), "compare", e, e, "--bounds", ""}, "--bounds"},
      {{cli(), "compare", e, e, "--filter", ""}, "--filter"},
      {{cli(), "answer", e, "--model", m, "--quiet", "--filter", "", "--out", s.p("a.h5")}, "--filter"},
      {{cli(), "capture", "--model", m, "--random-tokens", "4", "--quiet", "--force-decisions", "", "--out", s.p("x.h5")}, "--force-decisions"},
      {{cli(), "capture", "--model", m, "--random-tokens", "4", "--quiet", "--case-name", "", "--out", s.p("x.h5")}, "--case-name"},
      {{cli(), "tokenize", "--model", m, "--text-file", ""}, "--text-file"},
      {{cli(), "kld", "--model", m, "--against", ""}, "--against"},
      {{cli(), "answer", e, "--model", m, "--quiet", "--out", ""}, "--out"},
      {{cli(), "synth", "--out", ""}, "--out"},
  };
  for (const auto& [argv, says] : trials) trial::expect_each_refused({argv}, 2, says, s.dir, before);
}

// ---- planted files at inputs ------------------------------------------------------------------------------
// Every input option of every command against a FIFO (no writer: an open would block), a directory, links
// to them and a dangling link: refused in one line, at once.
TEST(hostile_cli, planted_special_files_at_every_input) {
  NEED_CLI();
  Scratch s({"m.gguf", "e.h5"});
  ASSERT_TRUE(plant_special_files(s));
  fs::create_symlink(s.p("nowhere/x"), s.p("dangling"));
  {
    std::ofstream t(s.p("t.txt"));
    for (int i = 0; i < 40; ++i) t << "The quick brown fox " << i << " jumps over the lazy dog.\n";
  }
  const auto before = trial::snapshot(s.dir);
  const std::string m = s.p("m.gguf"), e = s.p("e.h5"), t = s.p("t.txt");
  trial::Options o;
  o.timeout_s = 20;
  for (const std::string name : {"fifo", "dir", "fifo_link", "dir_link", "dangling"}) {
    const std::string x = s.p(name);
    const std::vector<std::vector<std::string>> commands = {
        {cli(), "answer", x, "--model", m, "--quiet", "--out", s.p("a.h5")},
        {cli(), "answer", e, "--model", x, "--quiet", "--out", s.p("a.h5")},
        {cli(), "compare", e, e, "--bounds", x},
        {cli(), "plan", "--model", x, "--devices", "1", "--memory-per-device", "80"},
        {cli(), "tokenize", "--model", x, "--text", "hi"},
        {cli(), "generate", "--model", x, "--prompt-ids", "1", "-n", "1"},
        {cli(), "generate", "--model", m, "--against", x},
        {cli(), "bench", "--model", x, "--prompt-tokens", "2", "--decode-steps", "1", "--no-warmup"},
        {cli(), "kld", "--model", x, "--backend", "reference", "--text-file", t},
        {cli(), "kld", "--model", m, "--backend", "reference", "--text-file", x, "--ctx", "80"},
        {cli(), "kld", "--model", m, "--against", x},
    };
    trial::expect_each_refused(commands, 2, name, s.dir, before, o, 10.0);
  }
}

// A split model whose later shard is a FIFO or a directory: the first shard is a regular file, so only
// the reader's own check stands between the command and a blocking open.
TEST(hostile_cli, split_model_with_a_special_file_as_a_later_shard) {
  NEED_CLI();
  Scratch s(std::vector<std::string>{});
  Result r = trial::run({cli(), "synth", "--seed", "1", "--split", "3", "--out", s.p("x.gguf")});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string first = s.p("x-00001-of-00003.gguf"), second = s.p("x-00002-of-00003.gguf");
  fs::remove(second);
  trial::Options o;
  o.timeout_s = 20;
  for (const std::string kind : {"fifo", "dir"}) {
    SCOPED_TRACE(kind);
    if (kind == "fifo") ASSERT_EQ(mkfifo(second.c_str(), 0644), 0);
    else fs::create_directory(second);
    const auto before = trial::snapshot(s.dir);
    trial::expect_each_refused({{cli(), "inspect", first},
                                {cli(), "plan", "--model", first, "--devices", "1", "--memory-per-device", "80"},
                                {cli(), "tokenize", "--model", first, "--text", "hi"},
                                {cli(), "capture", "--model", first, "--random-tokens", "4", "--quiet", "--out", s.p("x.h5")}},
                               2, "x-00002-of-00003.gguf: not a regular file", s.dir, before, o);
    fs::remove(second);
  }
}

// ---- counts at their edges ----------------------------------------------------------------------------------
// Options not covered by i38_5: a layer list narrowed to int (4294967296 became layer 0 and captured it,
// exit 0; 4294967295 was reported as -1), a memory budget whose byte count overflowed size_t (1e300 GiB
// passed as "finite"), and the other sizes at their limits.
TEST(hostile_cli, counts_at_their_overflow_edges) {
  NEED_CLI();
  Scratch s({"m.gguf", "e.h5"});
  {
    std::ofstream t(s.p("t.txt"));
    for (int i = 0; i < 40; ++i) t << "The quick brown fox " << i << " jumps over the lazy dog.\n";
  }
  const auto before = trial::snapshot(s.dir);
  const std::string m = s.p("m.gguf"), e = s.p("e.h5"), t = s.p("t.txt");
  const std::string i64max = "9223372036854775807", i64min = "-9223372036854775808", u64over = "18446744073709551616";
  auto cap = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = {cli(), "capture", "--model", m, "--random-tokens", "4", "--decode-steps", "0", "--quiet", "--out", s.p("x.h5")};
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  trial::Options o;
  o.timeout_s = 20;
  const std::vector<std::pair<std::vector<std::string>, std::string>> trials = {
      {cap({"--layers", "4294967296"}), "--layers"},
      {cap({"--layers", "4294967295"}), "'4294967295'"},
      {cap({"--layers", "0,18446744073709551617"}), "--layers"},
      {cap({"--op-layers", "4294967297"}), "--op-layers"},
      {cap({"--op-layers", "-4294967296"}), "--op-layers"},
      {cap({"--expert-cache-mb", i64max}), "--expert-cache-mb"},
      {cap({"--threads", "4294967296"}), "--threads"},
      {{cli(), "generate", "--model", m, "--prompt-ids", "1", "-n", "1", "--expert-cache-gib", "1e300"}, "--expert-cache-gib"},
      {{cli(), "generate", "--model", m, "--prompt-ids", "1", "-n", "1", "--expert-cache-gib", "1e7"}, "--expert-cache-gib"},
      {{cli(), "bench", "--model", m, "--no-warmup", "--expert-cache-gib", "1.7e308"}, "--expert-cache-gib"},
      {{cli(), "answer", e, "--model", m, "--quiet", "--layers", "4294967296", "--out", s.p("a.h5")}, "--layers"},
      {{cli(), "plan", "--model", m, "--devices", "1", "--memory-per-device", "80", "--batch", i64max}, "absurdly large"},
      {{cli(), "plan", "--model", m, "--devices", "1", "--memory-per-device", "80", "--ubatch", i64max}, "absurdly large"},
      {{cli(), "plan", "--model", m, "--devices", "1", "--memory-per-device", "80", "--context", i64max}, "--context"},
      {{cli(), "plan", "--model", m, "--devices", "4294967297", "--memory-per-device", "80"}, "--devices"},
      {{cli(), "plan", "--model", m, "--devices", "1", "--memory-per-device", "1e300"}, "--memory-per-device"},
      {{cli(), "kld", "--model", m, "--backend", "reference", "--text-file", t, "--ctx", i64max}, "--ctx"},
      {{cli(), "kld", "--model", m, "--backend", "reference", "--text-file", t, "--ctx", i64min}, "--ctx"},
      {{cli(), "kld", "--model", m, "--backend", "reference", "--text-file", t, "--ctx", "80", "--max-windows", i64min}, "--max-windows"},
      {{cli(), "tokenize", "--model", m, "--ids", "4294967296"}, "--ids"},
      {{cli(), "tokenize", "--model", m, "--ids", u64over}, "--ids"},
      {{cli(), "synth", "--seed", "1", "--split", "1001", "--out", s.p("x.gguf")}, "--split"},
      {{cli(), "synth", "--seed", "1", "--split", "4294967297", "--out", s.p("x.gguf")}, "--split"},
      {{cli(), "synth", "--seed", "1", "--alignment", "9223372036854775808", "--out", s.p("x.gguf")}, "alignment"},
      {{cli(), "synth", "--seed", "1", "--n-embd", i64max, "--out", s.p("x.gguf")}, ""},
      {{cli(), "synth", "--seed", "1", "--vocab", "4294967296", "--out", s.p("x.gguf")}, ""},
  };
  for (const auto& [argv, says] : trials) trial::expect_each_refused({argv}, 2, says, s.dir, before, o, 10.0);
}

// ---- text from files reaching the terminal ------------------------------------------------------------------
// inspect printed the verdict of a GGUF whose architecture string holds control characters raw on stderr
// (two lines, a screen clear) and the string itself raw in its report.
TEST(hostile_cli, gguf_strings_reach_the_terminal_escaped) {
  NEED_CLI();
  Scratch s(std::vector<std::string>{});
  using testing_gguf::Bytes;
  testing_gguf::write_bytes(s.p("arch.gguf"), Bytes().header(3, 0, 2).kv_str("general.architecture", kNasty).kv_str("general.name", kNasty).b);
  testing_gguf::write_bytes(s.p("name.gguf"), Bytes().header(3, 0, 2).kv_str("general.architecture", "glm-dsa").kv_str("n" + kNasty, "v").b);
  const auto before = trial::snapshot(s.dir);
  for (const std::string f : {"arch.gguf", "name.gguf"}) {
    SCOPED_TRACE(f);
    const Result r = trial::run({cli(), "inspect", s.p(f)});
    expect_refused(r, 2, "", s.dir, before);
    expect_no_raw_control(r.err, false, "stderr");
    expect_no_raw_control(r.out, true, "stdout");
    EXPECT_NE(r.out.find("\\x1b]0;pwned\\x07\\x1b[2J\\nnext\\r\\u009bX\\xff"), std::string::npos) << "shown escaped: " << r.out;
    // --json escapes by JSON's rules (and replaces the byte that is not UTF-8).
    const Result j = trial::run({cli(), "inspect", s.p(f), "--json"});
    EXPECT_EQ(j.status, 2) << j.err;
    expect_no_raw_control(j.out, true, "--json stdout", true);
    expect_no_raw_control(j.err, false, "--json stderr");
  }
}

// A case group named with control characters: compare printed it raw in its table, answer in its progress
// line. Attributes and dataset names of the same bytes stay out of the text (or are escaped).
TEST(hostile_cli, fixture_names_reach_the_terminal_escaped) {
  NEED_CLI();
  Scratch s({"m.gguf", "e.h5"});
  const std::string bad = s.p("bad.h5");
  fs::copy_file(s.p("e.h5"), bad);
  const std::string py_nasty = "\"\\x1b]0;pwned\\x07\\x1b[2J\\nnext\\r\\u009bX\"";
  if (!h5py_edit(bad, "n=" + py_nasty + "; f.move(c, \"case\"+n); c=\"case\"+n; f.attrs[\"producer\"]=\"p\"+n; f[c].attrs[\"backend\"]=\"b\"+n; "
                      "f[c][\"layers/0/x\"+n]=f[c][\"layers/0/attn_out\"][...]"))
    GTEST_SKIP() << "skipped: no python3 h5py";
  const auto before = trial::snapshot(s.dir);
  for (const auto& argv : std::vector<std::vector<std::string>>{{cli(), "compare", s.p("e.h5"), bad},
                                                                 {cli(), "compare", bad, s.p("e.h5")},
                                                                 {cli(), "compare", bad, bad, "--require-all"}}) {
    SCOPED_TRACE(argv[2] + " " + argv[3]);
    const Result r = trial::run(argv);
    EXPECT_EQ(r.status, 0) << r.err;
    expect_no_raw_control(r.out, true, "stdout");
    expect_no_raw_control(r.err, true, "stderr");
    EXPECT_NE(r.out.find("case\\x1b]0;pwned"), std::string::npos) << r.out;
  }
  const Result a = trial::run({cli(), "answer", bad, "--model", s.p("m.gguf"), "--out", s.p("a.h5")});
  EXPECT_EQ(a.status, 0) << a.err;
  expect_no_raw_control(a.err, true, "answer stderr");
  expect_no_raw_control(a.out, true, "answer stdout");
  EXPECT_EQ(trial::lines(a.err), 1) << a.err;
}

// kld and generate --against printed the run file's engine name raw on stderr.
TEST(hostile_cli, engine_run_strings_reach_the_terminal_escaped) {
  NEED_CLI();
  Scratch s({"m.gguf"});
  const std::string src = std::string(MLACONF_SOURCE_DIR) + "/suites/kld_against/data/llama_cpp_server.json";
  if (!fs::exists(src)) GTEST_SKIP() << "skipped: " << src << " missing";
  if (std::system(("/usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j[\"engine\"]=\"eng\\x1b]0;pwned\\x07\\n\\x9bX\"; "
                   "json.dump(j, open(sys.argv[2], \"w\"))' '" + src + "' '" + s.p("run.json") + "'").c_str()) != 0)
    GTEST_SKIP() << "skipped: no /usr/bin/python3";
  for (const std::string cmd : {"kld", "generate"}) {
    SCOPED_TRACE(cmd);
    const Result r = trial::run({cli(), cmd, "--model", s.p("m.gguf"), "--against", s.p("run.json")});
    EXPECT_EQ(r.status, 0) << r.err;
    expect_no_raw_control(r.err, true, "stderr");
    EXPECT_NE(r.err.find("eng\\x1b]0;pwned\\x07\\n\\u009bX"), std::string::npos) << r.err;
    if (cmd == "kld") expect_no_raw_control(r.out, true, "stdout");
  }
}

// ---- fixtures of the right names, the wrong dtype or rank ---------------------------------------------------
// Every dataset the judge reads is checked against the schema's dtype and rank before it is read: a wrong
// one is refused in one line (exit 2) on either side of compare, and by answer where it replays it.
TEST(hostile_cli, fixture_datasets_of_the_wrong_dtype_or_rank) {
  NEED_CLI();
  struct Edit {
    std::string ds, value;
    bool answer_reads;  // answer replays it (input_ids, op tensors); logits it does not read
  };
  const std::vector<Edit> edits = {
      {"input_ids", "x.astype(\"f8\")", true},
      {"input_ids", "numpy.array([b\"a\"]*len(x))", true},
      {"input_ids", "x.reshape(1,-1)", true},
      {"input_ids", "numpy.int32(5)", true},
      {"layers/0/attn_out", "x.astype(\"i4\")", true},
      {"layers/0/attn_out", "x.astype(\"c16\")", true},
      {"layers/0/attn_out", "x.reshape(-1)", true},
      {"layers/0/attn_out", "x.reshape(1,*x.shape)", true},
      {"layers/0/attn_out", "numpy.ascontiguousarray(x.T)", true},
      {"layers/1/indexer_topk", "x.astype(\"f4\")", false},
      {"layers/1/indexer_topk", "x.reshape(-1)", false},
      {"logits", "x>0", false},
      {"logits", "numpy.zeros((0, x.shape[1]))", false},
      {"logits", "numpy.zeros(3, dtype=[(\"a\",\"f4\"),(\"b\",\"i4\")])", false},
  };
  for (const Edit& e : edits) {
    SCOPED_TRACE(e.ds + " = " + e.value);
    Scratch s({"m.gguf", "e.h5"});
    const std::string bad = s.p("bad.h5");
    fs::copy_file(s.p("e.h5"), bad);
    if (!h5py_edit(bad, "import numpy; x=f[c][\"" + e.ds + "\"][...]; del f[c][\"" + e.ds + "\"]; f[c][\"" + e.ds + "\"]=" + e.value))
      GTEST_SKIP() << "skipped: no python3 h5py (with numpy)";
    const auto before = trial::snapshot(s.dir);
    trial::Options o;
    o.timeout_s = 30;
    std::vector<std::vector<std::string>> commands = {{cli(), "compare", s.p("e.h5"), bad}, {cli(), "compare", bad, s.p("e.h5")}};
    if (e.answer_reads) commands.push_back({cli(), "answer", bad, "--model", s.p("m.gguf"), "--quiet", "--out", s.p("a.h5")});
    trial::expect_each_refused(commands, 2, "", s.dir, before, o);
  }
  // Dtypes the schema accepts on read (fixtures/SCHEMA.md: int64 ids, float16 storage) are judged, not refused.
  Scratch s({"e.h5"});
  const std::string ok = s.p("ok.h5");
  fs::copy_file(s.p("e.h5"), ok);
  ASSERT_TRUE(h5py_edit(ok, "x=f[c][\"input_ids\"][...]; del f[c][\"input_ids\"]; f[c][\"input_ids\"]=x.astype(\"i8\")"));
  const Result r = trial::run({cli(), "compare", s.p("e.h5"), ok});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
}

// ---- a GGUF whose tensor data lies past its end -------------------------------------------------------------
// The reader bounds every tensor's [offset, offset + bytes) by the data section (an offset near 2^64 cannot
// wrap the sum); every command that opens a model refuses such a file in one line before any work.
TEST(hostile_cli, gguf_tensor_data_past_the_end_of_the_file) {
  NEED_CLI();
  Scratch s({"m.gguf", "e.h5"});
  using testing_gguf::Bytes;
  auto file = [](uint64_t offset) {
    // One F32 tensor of 8 values (32 bytes); 64 bytes of data follow the header.
    return Bytes().header(3, 1, 1).kv_str("general.architecture", "glm-dsa").tinfo("token_embd.weight", {8}, 0, offset).pad_to(32).zeros(64).b;
  };
  testing_gguf::write_bytes(s.p("far.gguf"), file(uint64_t{1} << 40));
  testing_gguf::write_bytes(s.p("wrap.gguf"), file(UINT64_MAX - 31));  // aligned; offset + 32 wraps to 0
  testing_gguf::write_bytes(s.p("edge.gguf"), file(64));               // starts exactly at the end
  // A real model whose last tensor's offset is moved past the end (the header keeps its size).
  {
    std::vector<uint8_t> b = testing_gguf::read_bytes(s.p("m.gguf"));
    ASSERT_GT(b.size(), 1000u);
    std::ofstream(s.p("cut.gguf"), std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size() - 4096));
  }
  const auto before = trial::snapshot(s.dir);
  trial::Options o;
  o.timeout_s = 20;
  for (const std::string f : {"far.gguf", "wrap.gguf", "edge.gguf", "cut.gguf"}) {
    const std::string g = s.p(f);
    trial::expect_each_refused({{cli(), "inspect", g},
                                {cli(), "plan", "--model", g, "--devices", "1", "--memory-per-device", "80"},
                                {cli(), "tokenize", "--model", g, "--text", "hi"},
                                {cli(), "generate", "--model", g, "--prompt-ids", "1", "-n", "1"},
                                {cli(), "bench", "--model", g, "--prompt-tokens", "2", "--decode-steps", "1", "--no-warmup"},
                                {cli(), "capture", "--model", g, "--random-tokens", "4", "--quiet", "--out", s.p("x.h5")},
                                {cli(), "answer", s.p("e.h5"), "--model", g, "--quiet", "--out", s.p("a.h5")}},
                               2, "past the end of the file", s.dir, before, o);
  }
}

}  // namespace
}  // namespace mlaconf
