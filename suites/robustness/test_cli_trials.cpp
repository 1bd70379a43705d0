// Issue 13: careless or hostile use of every subcommand, each trial a real `mlaconf` process (MLACONF_CLI)
// run in a folder of its own. A trial asserts the exit code, exactly one line on stderr (`mlaconf:
// error: ...` for exit 2), that no file is left behind (no temporary "*.tmp.*") and that the files that
// were there are unchanged. The test names carry the number of the problem in the issue (p1 ... p10;
// i38_N: issue 38, the N-th item of its work list).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/json.h"
#include "suites/core/gguf_bytes.h"
#include "suites/robustness/cli_trial.h"
#include "suites/robustness/trial_setup.h"

namespace mlaconf {
namespace {
namespace fs = std::filesystem;
using trial::Result;

const std::string& kCli = trial::cli();  // MLACONF_TRIAL_CLI: another build (trial_setup.h)
using trial::data_dir;
using trial::expect_refused;
using trial::h5py_edit;
using trial::Scratch;

std::vector<std::string> capture_args(const Scratch& s, const std::string& out) {
  return {kCli, "capture", "--model", s.p("m.gguf"), "--random-tokens", "16", "--seed", "1", "--quiet", "--out", out};
}

// ---- 1. full disk --------------------------------------------------------------------------------------
TEST(cli_trials, p1_capture_on_a_full_disk_rlimit) {
  NEED_CLI();
  Scratch s;
  const auto before = trial::snapshot(s.dir);
  trial::Options o;
  o.fsize_limit = 1 << 20;  // the fixture is ~4 MB
  Result r = trial::run(capture_args(s, s.p("out.h5")), o);
  expect_refused(r, 2, "out.h5", s.dir, before);
}

TEST(cli_trials, p1_capture_and_synth_on_a_full_small_filesystem) {
  NEED_CLI();
  Scratch s;
  const std::string small = s.p("small");
  fs::create_directory(small);
  if (mount("tmpfs", small.c_str(), "tmpfs", 0, "size=1m") != 0) GTEST_SKIP() << "skipped: cannot mount a tmpfs here (not root?)";
  struct Unmount {
    std::string p;
    ~Unmount() { umount(p.c_str()); }
  } um{small};
  const auto before = trial::snapshot(s.dir);
  Result r = trial::run(capture_args(s, small + "/out.h5"));
  expect_refused(r, 2, "No space left on device", s.dir, before);
  // synth checks the free space first: refused before writing anything.
  r = trial::run({kCli, "synth", "--seed", "1", "--out", small + "/m.gguf"});
  expect_refused(r, 2, "free", s.dir, before);
}

TEST(cli_trials, p1_synth_on_a_full_disk_rlimit) {
  NEED_CLI();
  Scratch s;
  const auto before = trial::snapshot(s.dir);
  trial::Options o;
  o.fsize_limit = 1 << 20;
  Result r = trial::run({kCli, "synth", "--seed", "1", "--out", s.p("x.gguf")}, o);
  expect_refused(r, 2, "x.gguf", s.dir, before);
}

// ---- 2. interrupts -------------------------------------------------------------------------------------
void interrupted(const std::vector<std::string>& argv, const Scratch& s, int sig) {
  const auto before = trial::snapshot(s.dir);
  trial::Options o;
  o.cwd = s.dir;
  o.wait_for = ".tmp.";
  bool sent = false;
  o.on_file = [&](pid_t pid) {
    kill(pid, sig);
    sent = true;
  };
  Result r = trial::run(argv, o);
  ASSERT_TRUE(sent) << "the temporary file never appeared; stderr: " << r.err;
  EXPECT_EQ(r.signal, 0) << "killed by the signal instead of handling it";
  EXPECT_EQ(r.status, 128 + sig) << r.err;
  EXPECT_EQ(trial::snapshot(s.dir), before) << "a temporary file was left behind";
}

TEST(cli_trials, p2_sigint_while_synth_writes) {
  NEED_CLI();
  Scratch s;
  interrupted({kCli, "synth", "--seed", "1", "--out", "x.gguf"}, s, SIGINT);
}

TEST(cli_trials, p2_sigterm_while_capture_writes) {
  NEED_CLI();
  Scratch s;
  interrupted({kCli, "capture", "--model", "m.gguf", "--random-tokens", "16", "--seed", "1", "--quiet", "--out", "x.h5"}, s, SIGTERM);
}

TEST(cli_trials, p2_sigint_while_capture_writes) {
  NEED_CLI();
  Scratch s;
  interrupted({kCli, "capture", "--model", "m.gguf", "--random-tokens", "16", "--seed", "1", "--quiet", "--out", "x.h5"}, s, SIGINT);
}

// ---- 3. synth's size against the free space, said first ---------------------------------------------------
TEST(cli_trials, p3_synth_too_large_for_the_disk_is_refused_first) {
  NEED_CLI();
  Scratch s;
  const auto before = trial::snapshot(s.dir);
  trial::Options o;
  o.timeout_s = 30;
  o.fsize_limit = 64 << 20;  // a guard: a synth that starts writing anyway stops at 64 MB
  Result r = trial::run({kCli, "synth", "--n-embd", "100000000", "--out", s.p("huge.gguf")}, o);
  expect_refused(r, 2, "free", s.dir, before);
  EXPECT_NE(r.out.find("bytes free"), std::string::npos) << "the size and the free space are printed first: " << r.out;
}

// ---- 4. validation before work ------------------------------------------------------------------------
TEST(cli_trials, p4_random_tokens_beyond_the_context_refused_at_once) {
  NEED_CLI();
  Scratch s;
  const auto before = trial::snapshot(s.dir);
  Result r = trial::run({kCli, "capture", "--model", s.p("m.gguf"), "--random-tokens", "1000000000", "--out", s.p("x.h5")});
  expect_refused(r, 2, "context length 4096", s.dir, before);
  EXPECT_LT(r.seconds, 3.0) << "validated only after building the tokens";
}

TEST(cli_trials, p4_bad_out_refused_before_the_capture) {
  NEED_CLI();
  Scratch s;
  fs::create_directory(s.p("adir"));
  const auto before = trial::snapshot(s.dir);
  // 400 tokens: seconds of work that a late check would do first.
  for (const std::string& out : {s.p("no/such/dir/x.h5"), s.p("adir"), s.p("adir/")}) {
    Result r = trial::run({kCli, "capture", "--model", s.p("m.gguf"), "--random-tokens", "400", "--quiet", "--out", out});
    expect_refused(r, 2, "--out", s.dir, before);
    EXPECT_LT(r.seconds, 3.0) << out << ": reported only after the capture";
  }
}

TEST(cli_trials, p4_read_only_out_refused_before_the_capture) {
  NEED_CLI();
  Scratch s;
  const std::string ro = s.p("ro");
  fs::create_directory(ro);
  // Root writes into any folder whatever its mode bits, so a read-only filesystem it is.
  if (mount("tmpfs", ro.c_str(), "tmpfs", MS_RDONLY, "size=1m") != 0) GTEST_SKIP() << "skipped: cannot mount a tmpfs here (not root?)";
  struct Unmount {
    std::string p;
    ~Unmount() { umount(p.c_str()); }
  } um{ro};
  const auto before = trial::snapshot(s.dir);
  Result r = trial::run({kCli, "capture", "--model", s.p("m.gguf"), "--random-tokens", "400", "--quiet", "--out", ro + "/x.h5"});
  expect_refused(r, 2, "not writable", s.dir, before);
  EXPECT_LT(r.seconds, 3.0) << "reported only after the capture";
}

// ---- 5. an output never overwrites an input ------------------------------------------------------------
TEST(cli_trials, p5_capture_out_is_the_model) {
  NEED_CLI();
  Scratch s;
  const auto before = trial::snapshot(s.dir);
  Result r = trial::run(capture_args(s, s.p("m.gguf")));
  expect_refused(r, 2, "is the input", s.dir, before);
  fs::create_hard_link(s.p("m.gguf"), s.p("alias.gguf"));  // another name, same inode
  const auto before2 = trial::snapshot(s.dir);
  r = trial::run(capture_args(s, s.p("alias.gguf")));
  expect_refused(r, 2, "is the input", s.dir, before2);
}

TEST(cli_trials, p5_compare_json_is_expected) {
  NEED_CLI();
  Scratch s({"e.h5", "f32.h5"});
  const auto before = trial::snapshot(s.dir);
  Result r = trial::run({kCli, "compare", s.p("e.h5"), s.p("f32.h5"), "--json", s.p("e.h5")});
  expect_refused(r, 2, "is the input", s.dir, before);
  r = trial::run({kCli, "compare", s.p("e.h5"), s.p("f32.h5"), "--plot", s.p("f32.h5")});
  expect_refused(r, 2, "is the input", s.dir, before);
}

// ---- 6. JSON -------------------------------------------------------------------------------------------
TEST(cli_trials, p6_compare_json_numbers_round_trip) {
  NEED_CLI();
  Scratch s({"e.h5", "f32.h5"});
  Result r = trial::run({kCli, "compare", s.p("e.h5"), s.p("f32.h5"), "--json", s.p("r.json")});
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(s.p("r.json"));
  std::stringstream text;
  text << in.rdbuf();
  const Json j = Json::parse(text.str());
  int checked = 0;
  for (const Json& d : j["datasets"]) {
    if (!d.contains("cosine") || !d["cosine"].is_number()) continue;
    const double c = d["cosine"].get<double>();
    ASSERT_TRUE(d.contains("one_minus_cosine")) << d.dump();
    EXPECT_EQ(d["one_minus_cosine"].get<double>(), 1 - c) << d.dump();
    // f32 against f64: the cosine of a float dataset is below 1, and the JSON must still say so (a
    // %.6g writer printed 1 for 1 - 7e-13).
    if (d["class"] == "activation" && d["nmse"].get<double>() > 0) {
      EXPECT_LT(c, 1.0) << d.dump();
      ++checked;
    }
    // Shortest round trip: printing the parsed double back gives the same text.
    const std::string t = json_text(d["nmse"], -1);
    EXPECT_EQ(Json::parse(t).get<double>(), d["nmse"].get<double>());
  }
  EXPECT_GT(checked, 10);
  // The f32 tolerance bound 1 - 1e-7 must not print as 1.
  bool bound = false;
  for (const Json& d : j["datasets"])
    if (d.contains("tol") && d["tol"].contains("cos_min")) bound |= d["tol"]["cos_min"].get<double>() < 1.0;
  EXPECT_TRUE(bound);
}

TEST(cli_trials, p6_json_valid_for_any_path) {
  NEED_CLI();
  Scratch s({"e.h5", "f32.h5", "m.gguf"});
  const std::string odd = s.p("q\"uote\\ \xff latin.h5");  // a quote, a backslash, a byte that is not UTF-8
  fs::rename(s.p("e.h5"), odd);
  Result r = trial::run({kCli, "compare", odd, s.p("f32.h5"), "--json", s.p("r.json")});
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(s.p("r.json"));
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NO_THROW({ const Json parsed = Json::parse(text.str()); (void)parsed; }) << text.str().substr(0, 300);
  // bench --json with such a model path.
  const std::string model = s.p("m\"odel\xfe.gguf");
  fs::rename(s.p("m.gguf"), model);
  r = trial::run({kCli, "bench", "--model", model, "--prompt-tokens", "2", "--decode-steps", "1", "--no-warmup", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  Json b;
  ASSERT_NO_THROW(b = Json::parse(r.out)) << r.out;
  EXPECT_NE(b["model"].get<std::string>().find("m\"odel"), std::string::npos);
}

// plan --json once wrote its JSON by hand and passed a byte that is not UTF-8 through raw: the object must
// parse (python3 -m json.tool, as a user's script would) with the byte replaced by U+FFFD.
TEST(cli_trials, p6_plan_json_valid_for_a_path_that_is_not_utf8) {
  NEED_CLI();
  Scratch s({"m.gguf"});
  const std::string model = s.p("pl\"an\\ \xff.gguf");
  fs::rename(s.p("m.gguf"), model);
  const Result r = trial::run({kCli, "plan", "--model", model, "--devices", "2", "--memory-per-device", "80", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  Json j;
  ASSERT_NO_THROW(j = Json::parse(r.out)) << r.out;
  EXPECT_NE(j["model"].get<std::string>().find("pl\"an\\ \xef\xbf\xbd.gguf"), std::string::npos) << r.out;
  EXPECT_EQ(j["plan"].size(), 2u) << r.out;
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "skipped: no /usr/bin/python3 for json.tool";
  {
    std::ofstream o(s.p("plan.json"), std::ios::binary);
    o << r.out;
  }
  const Result tool = trial::run({"/usr/bin/python3", "-m", "json.tool", s.p("plan.json")});
  EXPECT_EQ(tool.status, 0) << tool.err << r.out;
}

// ---- 7. what synth writes, the readers accept ------------------------------------------------------------
TEST(cli_trials, p7_synth_refuses_a_type_the_readers_refuse) {
  NEED_CLI();
  Scratch s(std::vector<std::string>{});
  const auto before = trial::snapshot(s.dir);
  Result r = trial::run({kCli, "synth", "--type", "norm=Q8_0", "--out", s.p("x.gguf")});
  expect_refused(r, 2, "expected F32", s.dir, before);
}

// ---- 8. nonsense options ---------------------------------------------------------------------------------
TEST(cli_trials, p8_nonsense_options_are_exit_2) {
  NEED_CLI();
  Scratch s;
  fs::create_directory(s.p("adir"));
  const auto before = trial::snapshot(s.dir);
  const std::string m = s.p("m.gguf");
  struct T {
    std::vector<std::string> argv;
    std::string says;
  };
  const std::vector<T> trials = {
      {{kCli, "generate", "--model", m, "--prompt-ids", "1,2", "-n", "1", "--expert-cache-gib", "-1"}, "--expert-cache-gib"},
      {{kCli, "generate", "--model", m, "--prompt-ids", "1,2", "-n", "1", "--expert-cache-gib", "nan"}, "--expert-cache-gib"},
      {{kCli, "bench", "--model", m, "--expert-cache-gib", "inf"}, "--expert-cache-gib"},
      {{kCli, "capture", "--model", m, "--random-tokens", "4", "--seed", "-1", "--out", s.p("x.h5")}, "--seed"},
      {{kCli, "synth", "--seed", "-1", "--out", s.p("x.gguf")}, "--seed"},
      {{kCli, "tokenize", "--model", m, "--text-file", s.p("adir")}, "directory"},
      {{kCli, "tokenize", "--model", m, "--ids", "[1, 2,"}, "--ids"},
      {{kCli, "tokenize", "--model", m, "--ids", "1,,2"}, "--ids"},
      {{kCli, "inspect", m, "--stats"}, "--tensor"},
  };
  for (const T& t : trials) {
    SCOPED_TRACE(t.argv[1] + " " + t.argv[t.argv.size() - 1]);
    expect_refused(trial::run(t.argv), 2, t.says, s.dir, before);
  }
}

TEST(cli_trials, p8_fixture_case_of_unknown_kind) {
  NEED_CLI();
  Scratch s({"e.h5"});
  const std::string bad = s.own("e.h5");
  fs::copy_file(data_dir() + "/e.h5", s.p("good.h5"));
  if (!h5py_edit(bad, "f[c].attrs[\"kind\"]=\"banana\"")) GTEST_SKIP() << "skipped: no python3 h5py";
  const auto before = trial::snapshot(s.dir);
  expect_refused(trial::run({kCli, "compare", s.p("good.h5"), bad}), 2, "banana", s.dir, before);
  expect_refused(trial::run({kCli, "compare", bad, s.p("good.h5")}), 2, "banana", s.dir, before);
}

TEST(cli_trials, p8_answer_without_input_ids) {
  NEED_CLI();
  Scratch s({"e.h5"});
  const std::string bad = s.own("e.h5");
  fs::copy_file(data_dir() + "/e.h5", s.p("good.h5"));
  if (!h5py_edit(bad, "f[c].attrs[\"kind\"]=\"op_answer\"; f[c].attrs[\"answers\"]=\"[]\"; del f[c][\"input_ids\"]"))
    GTEST_SKIP() << "skipped: no python3 h5py";
  const auto before = trial::snapshot(s.dir);
  expect_refused(trial::run({kCli, "compare", s.p("good.h5"), bad}), 2, "input_ids", s.dir, before);
}

// ---- 9. exit codes and messages --------------------------------------------------------------------------
TEST(cli_trials, p9_unknown_fault_is_bad_input_not_unsupported) {
  NEED_CLI();
  Scratch s;
  const auto before = trial::snapshot(s.dir);
  for (const std::string backend : {"cuda", "both", "reference"})
    expect_refused(trial::run({kCli, "generate", "--model", s.p("m.gguf"), "--prompt-ids", "1,2", "-n", "1", "--backend", backend,
                               "--fault", "banana"}),
                   2, "banana", s.dir, before);
}

TEST(cli_trials, p9_argument_errors_are_one_prefixed_line) {
  NEED_CLI();
  Scratch s;
  const auto before = trial::snapshot(s.dir);
  expect_refused(trial::run({kCli, "capture"}), 2, "--model", s.dir, before);
  expect_refused(trial::run({kCli, "inspect"}), 2, "model", s.dir, before);
  expect_refused(trial::run({kCli, "bench", "--model", s.p("m.gguf"), "--prompt-tokens", "x"}), 2, "--prompt-tokens", s.dir, before);
  expect_refused(trial::run({kCli, "frobnicate"}), 2, "subcommand", s.dir, before);
  expect_refused(trial::run({kCli}), 2, "subcommand", s.dir, before);
}

TEST(cli_trials, p9_special_files_refused_without_blocking) {
  NEED_CLI();
  Scratch s;
  ASSERT_EQ(mkfifo(s.p("fifo").c_str(), 0644), 0);
  const auto before = trial::snapshot(s.dir);
  trial::Options o;
  o.timeout_s = 20;
  expect_refused(trial::run({kCli, "inspect", s.p("fifo")}, o), 2, "FIFO", s.dir, before);
  expect_refused(trial::run({kCli, "compare", s.p("fifo"), s.p("e.h5")}, o), 2, "FIFO", s.dir, before);
  expect_refused(trial::run({kCli, "capture", "--model", s.p("fifo"), "--random-tokens", "4", "--out", s.p("x.h5")}, o), 2, "FIFO",
                 s.dir, before);
  expect_refused(trial::run({kCli, "tokenize", "--model", s.p("m.gguf"), "--text-file", s.p("fifo")}, o), 2, "FIFO", s.dir, before);
  expect_refused(trial::run({kCli, "inspect", "/dev/zero"}, o), 2, "device", s.dir, before);  // read only: safe
  // Outputs: only special files inside the scratch folder (an old mlaconf renamed its output over
  // /dev/null, replacing the device with a fixture).
  expect_refused(trial::run(capture_args(s, s.p("fifo")), o), 2, "FIFO", s.dir, before);
  if (mknod(s.p("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    const auto with_dev = trial::snapshot(s.dir);
    expect_refused(trial::run(capture_args(s, s.p("null")), o), 2, "device", s.dir, with_dev);
  }
}

TEST(cli_trials, p9_truncated_header_says_truncated) {
  NEED_CLI();
  Scratch s;
  {
    std::ifstream in(s.p("m.gguf"), std::ios::binary);
    std::string head(24, '\0');  // magic, version, tensor count, metadata count: nothing after
    in.read(head.data(), 24);
    std::ofstream(s.p("cut.gguf"), std::ios::binary) << head;
  }
  const auto before = trial::snapshot(s.dir);
  expect_refused(trial::run({kCli, "inspect", s.p("cut.gguf")}), 2, "truncated", s.dir, before);
}

// ---- 10. compare says what it did not judge -----------------------------------------------------------
TEST(cli_trials, p10_compare_lists_what_it_did_not_judge) {
  NEED_CLI();
  Scratch s({"e.h5", "model_level.h5"});
  Result r = trial::run({kCli, "compare", s.p("e.h5"), s.p("model_level.h5"), "--json", s.p("r.json")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("not judged (in EXPECTED, not in ACTUAL)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layers/1/q_absorbed"), std::string::npos) << "an op-level dataset ACTUAL lacks is listed";
  std::ifstream in(s.p("r.json"));
  std::stringstream text;
  text << in.rdbuf();
  const Json j = Json::parse(text.str());
  const size_t n = j["not_judged_count"].get<size_t>();
  EXPECT_GT(n, 20u);
  EXPECT_EQ(j["not_judged"].size(), n);
  EXPECT_NE(r.out.find(std::to_string(n) + " not judged"), std::string::npos) << "the summary line counts them: " << r.out;
  // --require-all: what was not judged is a failure.
  r = trial::run({kCli, "compare", s.p("e.h5"), s.p("model_level.h5"), "--require-all", "--brief"});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
  // Negative control: a complete ACTUAL passes with --require-all.
  r = trial::run({kCli, "compare", s.p("e.h5"), s.p("e.h5"), "--require-all", "--brief"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(" 0 not judged"), std::string::npos) << r.out;
}

// ---- issue 38: inputs and conditions of a hostile user -------------------------------------------------
// i38_1: case attributes that size the judge's work are checked against each other and the shapes, before
// anything is allocated by them (a negative pos0 crashed attribution; a number past int range was exit 4).
TEST(cli_trials, i38_1_case_attributes_refused_before_work) {
  NEED_CLI();
  struct Edit {
    std::string file, code, says;
  };
  const std::vector<Edit> edits = {
      {"e.h5", "f[c].attrs[\"pos0\"]=-3", "pos0"},
      {"e.h5", "f[c].attrs[\"pos0\"]=2**40", "pos0"},
      {"e.h5", "f[c].attrs[\"pos0\"]=float(\"nan\")", "pos0"},
      {"e.h5", "f[c].attrs[\"pos0\"]=2.5", "pos0"},
      {"e.h5", "f[c].attrs[\"pos0\"]=\"7\"", "pos0"},
      {"e.h5", "f[c].attrs[\"pos0\"]=5", "pos0"},  // a full_forward starts at 0
      // A decode step whose pos0 disagrees with its cache rows (latent_cache holds T = 16 rows, not 5 + 16).
      {"e.h5", "f[c].attrs[\"kind\"]=\"decode_step\"; f[c].attrs[\"pos0\"]=5", "cache rows"},
      // No cache dataset to disagree with: the model's context bounds it (pos0 + T > 4096).
      {"model_level.h5", "f[c].attrs[\"kind\"]=\"decode_step\"; f[c].attrs[\"pos0\"]=4090", "4096 positions"},
      {"e.h5", "f[c].attrs[\"n_tokens\"]=17", "n_tokens"},
      {"e.h5", "f[c].attrs[\"forced_decisions\"]=7", "forced_decisions"},
      {"e.h5", "f[c].attrs[\"has_head\"]=-1", "has_head"},
      {"e.h5", "f[c].attrs[\"captured_layers\"]=\"[0, 99999999999999999999]\"", "captured_layers"},
      {"e.h5", "f[c].attrs[\"op_level_layers\"]=\"[4294967296]\"", "op_level_layers"},
      // 2^28 input ids declared in a file of a few MB (nothing written: chunks read as fill values).
      {"e.h5", "del f[c][\"input_ids\"]; f[c].create_dataset(\"input_ids\", shape=(1<<28,), dtype=\"i4\", chunks=(1<<16,), compression=\"gzip\")",
       "4096 positions"},
      // A hard link from a group to its own case group: a cycle the dataset walk followed forever.
      {"e.h5", "f[c][\"layers/0/loop\"]=f[c]", "link cycle"},
  };
  for (const Edit& e : edits) {
    SCOPED_TRACE(e.code);
    Scratch s({e.file});
    fs::copy_file(data_dir() + "/" + e.file, s.p("good.h5"));
    const std::string bad = s.own(e.file);
    if (!h5py_edit(bad, e.code)) GTEST_SKIP() << "skipped: no python3 h5py";
    const auto before = trial::snapshot(s.dir);
    trial::Options o;
    o.timeout_s = 20;
    for (const auto& argv : {std::vector<std::string>{kCli, "compare", s.p("good.h5"), bad}, std::vector<std::string>{kCli, "compare", bad, s.p("good.h5")},
                             std::vector<std::string>{kCli, "compare", bad, bad, "--json", s.p("r.json")}}) {
      const Result r = trial::run(argv, o);
      expect_refused(r, 2, e.says, s.dir, before);
      EXPECT_LT(r.seconds, 5.0) << "refused only after work";
    }
  }
}

// A dataset whose header declares far more values than the file stores (2^28 ids in a file of a few
// MB: chunks never written read as fill values) is refused before it is read, in bounded memory.
TEST(cli_trials, i38_1_dataset_declaring_more_than_it_stores) {
  NEED_CLI();
  Scratch s;
  const std::string g = s.p("g.h5"), bad = s.p("bad.h5");
  Result r = trial::run({kCli, "capture", "--model", s.p("m.gguf"), "--random-tokens", "4", "--generate", "2", "--no-op-level", "--quiet",
                         "--out", g});
  ASSERT_EQ(r.status, 0) << r.err;
  fs::copy_file(g, bad);
  if (!h5py_edit(bad, "c=[k for k in f.keys() if k.startswith(\"greedy\")][0]; del f[c][\"all_ids\"]; "
                      "f[c].create_dataset(\"all_ids\", shape=(1<<28,), dtype=\"i4\", chunks=(1<<16,))"))
    GTEST_SKIP() << "skipped: no python3 h5py";
  const auto before = trial::snapshot(s.dir);
  trial::Options o;
  o.timeout_s = 20;
  o.memory_limit = int64_t{1} << 30;  // the declared ids alone are 3 GB as read
  for (const auto& argv : {std::vector<std::string>{kCli, "compare", bad, g}, std::vector<std::string>{kCli, "compare", g, bad}}) {
    r = trial::run(argv, o);
    expect_refused(r, 2, "stores", s.dir, before);
    EXPECT_LT(r.seconds, 5.0);
  }
  // Negative control: the file as captured compares under the same limit.
  r = trial::run({kCli, "compare", g, g}, o);
  EXPECT_EQ(r.status, 0) << r.err;
}

// i38_2: a NaN (or inf) in a golden float dataset is a damaged golden (exit 2), never an agreement with the
// same NaN in an answer; a non-finite answer where the golden is finite fails. Datasets that may hold
// non-finite values by the schema (indexer_scores -inf for keys after the query, *_gap NaN where nothing
// was selected) keep passing: the negative control compares the untouched file with itself.
TEST(cli_trials, i38_2_non_finite_golden_is_damaged_and_non_finite_answer_fails) {
  NEED_CLI();
  Scratch s({"e.h5"});
  fs::copy_file(data_dir() + "/e.h5", s.p("nan.h5"));
  fs::copy_file(data_dir() + "/e.h5", s.p("inf.h5"));
  fs::copy_file(data_dir() + "/e.h5", s.p("scores.h5"));
  auto poke = [](const std::string& ds, const std::string& idx, const std::string& v) {
    return "d=f[c][\"" + ds + "\"]; x=d[...]; x[" + idx + "]=float(\"" + v + "\"); d[...]=x";
  };
  if (!h5py_edit(s.p("nan.h5"), poke("layers/0/attn_out", "3,5", "nan"))) GTEST_SKIP() << "skipped: no python3 h5py";
  ASSERT_TRUE(h5py_edit(s.p("inf.h5"), poke("logits", "0,0", "inf")));
  ASSERT_TRUE(h5py_edit(s.p("scores.h5"), poke("layers/1/indexer_scores", "15,0", "-inf")));  // a causal key: finite in the golden
  // The schema's own non-finite values are there (else the negative control below proves nothing).
  ASSERT_EQ(std::system(("/usr/bin/python3 -c 'import h5py,sys,numpy as np; f=h5py.File(sys.argv[1]); c=list(f.keys())[0]; "
                         "s=f[c][\"layers/1/indexer_scores\"][...]; g=f[c][\"layers/1/indexer_topk_gap\"][...]; "
                         "sys.exit(0 if np.isneginf(s).any() and np.isnan(g).any() else 1)' '" + s.p("e.h5") + "'").c_str()),
            0)
      << "e.h5 holds no -inf indexer score and no NaN gap";
  const auto before = trial::snapshot(s.dir);
  // Golden damaged: refused whatever the answer holds (the same NaN used to pass).
  for (const std::string f : {"nan.h5", "inf.h5"}) {
    expect_refused(trial::run({kCli, "compare", s.p(f), s.p(f)}), 2, "damaged golden", s.dir, before);
    expect_refused(trial::run({kCli, "compare", s.p(f), s.p("e.h5")}), 2, "damaged golden", s.dir, before);
  }
  // Answers with a non-finite value where the golden is finite: a failure (exit 1), not a pass.
  for (const std::string f : {"nan.h5", "inf.h5", "scores.h5"}) {
    const Result r = trial::run({kCli, "compare", s.p("e.h5"), s.p(f), "--brief"});
    EXPECT_EQ(r.status, 1) << f << ": " << r.out << r.err;
    EXPECT_NE(r.out.find("non-finite"), std::string::npos) << f << ": " << r.out;
  }
  // Negative control: -inf scores and NaN gaps of the schema pass against themselves.
  const Result ok = trial::run({kCli, "compare", s.p("e.h5"), s.p("e.h5")});
  EXPECT_EQ(ok.status, 0) << ok.out << ok.err;
}

// i38_3: temporary files cannot be hijacked. A link planted at the old predictable name
// "<out>.tmp.<pid>" is neither followed (its target stays as it was) nor renamed into place.
TEST(cli_trials, i38_3_planted_link_at_a_temporary_name_is_not_followed) {
  Scratch s(std::vector<std::string>{});
  const std::string victim = s.p("victim.gguf"), out = s.p("r.json");
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, out + ".tmp." + std::to_string(::getpid()));
  write_file_atomic(out, std::string("result\n"));
  std::stringstream v, o;
  v << std::ifstream(victim).rdbuf();
  o << std::ifstream(out).rdbuf();
  EXPECT_EQ(v.str(), "precious") << "the planted link was followed";
  EXPECT_FALSE(fs::is_symlink(out)) << "the planted link was renamed into place";
  EXPECT_EQ(o.str(), "result\n");
  EXPECT_TRUE(fs::is_symlink(out + ".tmp." + std::to_string(::getpid()))) << "not ours to remove";
  // Every temporary name is new: two writers of one output never share one.
  fs::remove(out + ".tmp." + std::to_string(::getpid()));
  {
    AtomicFile a(out), b(out);
    a.write("a", 1);
    b.write("b", 1);
    EXPECT_EQ(fs::path(s.dir), fs::path(out).parent_path());
    size_t tmp = 0;
    for (const auto& e : fs::directory_iterator(s.dir)) tmp += e.path().filename().string().find(".tmp.") != std::string::npos;
    EXPECT_EQ(tmp, 2u) << "the temporary files are in the output's folder, one each";
  }  // neither committed: both removed
  for (const auto& e : fs::directory_iterator(s.dir)) EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

// A 255-byte output name (NAME_MAX) is legal: the temporary name must fit too.
TEST(cli_trials, i38_3_longest_output_name_works) {
  NEED_CLI();
  Scratch s({"e.h5"});
  const std::string out = s.p(std::string(250, 'r') + ".json");
  ASSERT_EQ(fs::path(out).filename().string().size(), 255u);
  const Result r = trial::run({kCli, "compare", s.p("e.h5"), s.p("e.h5"), "--json", out});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(out)) << r.err;
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(s.dir)) n += e.path().filename().string().find(".tmp.") != std::string::npos;
  EXPECT_EQ(n, 0u) << "a temporary file was left behind";
}

// A split GGUF appears whole or not at all: synth --split 3 whose second shard hits the file-size limit
// left the first shard behind.
TEST(cli_trials, i38_3_split_synth_on_a_full_disk_leaves_no_shard) {
  NEED_CLI();
  Scratch s(std::vector<std::string>{});
  // The shard sizes of this model, unlimited, to put the limit between the first shard and a later one.
  fs::create_directory(s.p("free"));
  Result r = trial::run({kCli, "synth", "--seed", "1", "--split", "3", "--out", s.p("free/x.gguf")});
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<uintmax_t> sizes;
  for (int k = 1; k <= 3; ++k) sizes.push_back(fs::file_size(s.p("free/x-0000" + std::to_string(k) + "-of-00003.gguf")));
  fs::remove_all(s.p("free"));
  size_t j = 1;
  while (j < sizes.size() && sizes[j] <= sizes[0]) ++j;
  if (j == sizes.size()) GTEST_SKIP() << "skipped: no shard after the first is larger than it";
  const auto before = trial::snapshot(s.dir);
  trial::Options o;
  o.fsize_limit = static_cast<long long>((sizes[0] + sizes[j]) / 2);  // shard 1 fits, shard j + 1 does not
  r = trial::run({kCli, "synth", "--seed", "1", "--split", "3", "--out", s.p("x.gguf")}, o);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(trial::snapshot(s.dir), before) << "a shard (or a temporary file) was left behind";
}

// i38_4: a result that cannot be written to stdout (`> /dev/full`) is exit 2 with one line, for every
// command that prints one.
TEST(cli_trials, i38_4_stdout_that_cannot_be_written_is_exit_2) {
  NEED_CLI();
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "skipped: no /dev/full";
  Scratch s({"m.gguf", "e.h5"});
  {
    std::ofstream t(s.p("t.txt"));
    for (int i = 0; i < 40; ++i) t << "The quick brown fox " << i << " jumps over the lazy dog.\n";
  }
  const auto before = trial::snapshot(s.dir);
  const std::string m = s.p("m.gguf");
  const std::vector<std::vector<std::string>> commands = {
      {kCli, "inspect", m},
      {kCli, "tokenize", "--model", m, "--text", "hello world"},
      {kCli, "plan", "--model", m, "--devices", "2", "--memory-per-device", "80"},
      {kCli, "compare", s.p("e.h5"), s.p("e.h5")},
      {kCli, "bench", "--model", m, "--prompt-tokens", "2", "--decode-steps", "1", "--no-warmup"},
      {kCli, "kld", "--model", m, "--backend", "reference", "--text-file", s.p("t.txt"), "--ctx", "80", "--max-windows", "1"},
  };
  for (const auto& argv : commands) {
    SCOPED_TRACE(argv[1]);
    trial::Options o;
    o.stdout_path = "/dev/full";
    // Negative control: the same command with a writable stdout succeeds.
    const Result ok = trial::run(argv);
    ASSERT_EQ(ok.status, 0) << ok.err;
    const Result r = trial::run(argv, o);
    if (argv[1] == "kld") {  // kld reports its progress on stderr: the error is its last line
      EXPECT_EQ(r.status, 2) << r.err;
      const size_t last = r.err.rfind('\n', r.err.size() >= 2 ? r.err.size() - 2 : 0);
      const std::string tail = last == std::string::npos ? r.err : r.err.substr(last + 1);
      EXPECT_EQ(tail.rfind("mlaconf: error: cannot write to standard output", 0), 0u) << r.err;
      EXPECT_EQ(trial::snapshot(s.dir), before);
      continue;
    }
    expect_refused(r, 2, "standard output", s.dir, before);
  }
}

// i38_4: --help and --version print to stdout too: a help text that cannot be written is exit 2 with
// one line, for the program and for every subcommand.
TEST(cli_trials, i38_4_help_that_cannot_be_written_is_exit_2) {
  NEED_CLI();
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "skipped: no /dev/full";
  Scratch s(std::vector<std::string>{});
  const auto before = trial::snapshot(s.dir);
  std::vector<std::vector<std::string>> commands = {{kCli, "--help"}, {kCli, "--version"}};
  for (const char* sub : {"inspect", "synth", "plan", "tokenize", "generate", "capture", "compare", "answer", "kld", "bench"})
    commands.push_back({kCli, sub, "--help"});
  for (const auto& argv : commands) {
    SCOPED_TRACE(argv[1] + " " + argv.back());
    const Result ok = trial::run(argv);  // negative control: a writable stdout gets the text, exit 0
    ASSERT_EQ(ok.status, 0) << ok.err;
    ASSERT_FALSE(ok.out.empty());
    trial::Options o;
    o.stdout_path = "/dev/full";
    expect_refused(trial::run(argv, o), 2, "cannot write to standard output", s.dir, before);
  }
}

// i38_5: counts checked before any sum of them: prompt + n past INT64_MAX passed the context check.
TEST(cli_trials, i38_5_huge_counts_refused_up_front) {
  NEED_CLI();
  Scratch s;
  const auto before = trial::snapshot(s.dir);
  const std::string m = s.p("m.gguf"), big = "9223372036854775807", big2 = "9223372036854775806";
  trial::Options o;
  o.timeout_s = 20;
  const std::vector<std::pair<std::vector<std::string>, std::string>> trials = {
      {{kCli, "generate", "--model", m, "--prompt-ids", "1,2", "-n", big2, "--ignore-eos"}, "-n"},
      {{kCli, "bench", "--model", m, "--decode-steps", big, "--no-warmup"}, "--decode-steps"},
      {{kCli, "bench", "--model", m, "--prompt-tokens", big, "--no-warmup"}, "--prompt-tokens"},
      {{kCli, "bench", "--model", m, "--prompt-tokens", big, "--decode-steps", big}, "--prompt-tokens"},
      {{kCli, "capture", "--model", m, "--random-tokens", big, "--decode-steps", "4", "--out", s.p("x.h5")}, "--random-tokens"},
  };
  for (const auto& [argv, says] : trials) {
    SCOPED_TRACE(argv[1] + " " + says);
    const Result r = trial::run(argv, o);
    expect_refused(r, 2, says, s.dir, before);
    EXPECT_LT(r.seconds, 5.0);
  }
}

// i38_6: capture's inputs are all regular files checked up front (--force-decisions too: a FIFO blocked
// forever), none is the output, and --case-name is checked before the work.
TEST(cli_trials, i38_6_capture_force_decisions_and_case_name_checked_first) {
  NEED_CLI();
  Scratch s;
  ASSERT_EQ(mkfifo(s.p("fifo").c_str(), 0644), 0);
  const auto before = trial::snapshot(s.dir);
  trial::Options o;
  o.timeout_s = 20;
  auto cap = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = {kCli, "capture", "--model", s.p("m.gguf"), "--random-tokens", "400", "--seed", "1", "--quiet"};
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  expect_refused(trial::run(cap({"--force-decisions", s.p("fifo"), "--out", s.p("x.h5")}), o), 2, "FIFO", s.dir, before);
  expect_refused(trial::run(cap({"--force-decisions", s.p("e.h5"), "--out", s.p("e.h5")}), o), 2, "is the input", s.dir, before);
  for (const std::string name : {"a/b", "..", "a\nb"}) {
    const Result r = trial::run(cap({"--case-name", name, "--out", s.p("x.h5")}), o);
    expect_refused(r, 2, "--case-name", s.dir, before);
    EXPECT_LT(r.seconds, 3.0) << "'" << name << "' refused only after the capture";
  }
}

// i38_7: whatever an error line quotes (a path, an option's value, a key from a GGUF) is escaped: one
// line, no control character, no byte that is not UTF-8 (a terminal escape would reach the terminal raw).
TEST(cli_trials, i38_7_error_lines_are_escaped) {
  NEED_CLI();
  Scratch s;
  const std::string nasty = "a\nb\r\x1b[2J\x07\xff\xc2\x9b\x7f";
  // A GGUF whose duplicate key (quoted in the error) holds the same bytes.
  testing_gguf::write_bytes(s.p("k.gguf"), testing_gguf::Bytes().header(3, 0, 2).kv_u32("k." + nasty, 1).kv_u32("k." + nasty, 2).b);
  const auto before = trial::snapshot(s.dir);
  const std::vector<std::vector<std::string>> trials = {
      {kCli, "inspect", s.p(nasty + ".gguf")},                          // a path
      {kCli, "inspect", s.p("m.gguf"), "--tensor", nasty},                // a name
      {kCli, "tokenize", "--model", s.p("m.gguf"), "--ids", "1,x" + nasty.substr(4)},  // an option's value (no blank: one item)
      {kCli, "inspect", s.p("k.gguf")},                                 // a string from the file
      {kCli, "compare", s.p(nasty), s.p("e.h5")},
  };
  for (const auto& argv : trials) {
    SCOPED_TRACE(argv[1] + " " + argv.back());
    const Result r = trial::run(argv);
    expect_refused(r, 2, "", s.dir, before);
    for (size_t i = 0; i + 1 < r.err.size(); ++i) {  // the last byte is the line's '\n'
      const unsigned char c = static_cast<unsigned char>(r.err[i]);
      EXPECT_FALSE(c < 0x20 || c == 0x7f || c == 0xff) << "raw byte " << int(c) << " at " << i << ": " << r.err;
    }
    EXPECT_EQ(r.err.find("\xc2\x9b"), std::string::npos) << "a raw C1 control (CSI)";
    EXPECT_NE(r.err.find("\\x1b"), std::string::npos) << "the escape character is shown escaped: " << r.err;
  }
}

// i38_8: files that crash the system libhdf5 itself (found by the fixture fuzzer, fuzz/fuzz_fixture.cpp:
// a SIGSEGV inside the library while it reads the file's structure; suites/robustness/data/README.md)
// are refused in one line, exit 2, by every command that reads a fixture: the HDF5 probe read them first
// in a child process (fixtures/h5_probe.h). Without the probe each of these commands died by SIGSEGV.
TEST(cli_trials, i38_8_file_that_crashes_libhdf5_is_refused) {
  NEED_CLI();
  Scratch s;
  for (const char* name : {"libhdf5_segv_1.h5", "libhdf5_segv_2.h5"}) {
    SCOPED_TRACE(name);
    const std::string bad = s.p(name);
    fs::copy_file(std::string(MLACONF_SOURCE_DIR) + "/suites/robustness/data/" + name, bad, fs::copy_options::overwrite_existing);
    const auto before = trial::snapshot(s.dir);
    const std::string m = s.p("m.gguf"), e = s.p("e.h5");
    const std::vector<std::vector<std::string>> commands = {
        {kCli, "compare", bad, e},
        {kCli, "compare", e, bad},
        {kCli, "answer", bad, "--model", m, "--out", s.p("a.h5")},
        {kCli, "capture", "--model", m, "--random-tokens", "16", "--seed", "1", "--decode-steps", "0", "--quiet",
         "--force-decisions", bad, "--out", s.p("x.h5")},
    };
    for (const auto& argv : commands) {
      SCOPED_TRACE(argv[1] + " " + argv[2]);
      // The probe's refusal ("damaged HDF5 file: the HDF5 library failed reading it (signal 11, SIGSEGV)")
      // or, where the library's stray read happens not to fault, its own error: one line naming the file.
      expect_refused(trial::run(argv), 2, name, s.dir, before);
    }
  }
}

}  // namespace
}  // namespace mlaconf
