// Test helper: see trial_setup.h.
#include "suites/robustness/trial_setup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace mlaconf::trial {
namespace fs = std::filesystem;

const std::string& cli() {
  static const std::string c = std::getenv("MLACONF_TRIAL_CLI") ? std::getenv("MLACONF_TRIAL_CLI") : MLACONF_CLI;
  return c;
}

bool have_cli() { return fs::exists(cli()); }

const std::string& data_dir() {
  static const std::string dir = [] {
    const std::string d = std::string(MLACONF_BINARY_DIR) + "/robustness_cli_data";
    fs::create_directories(d);
    const int lock = open((d + "/.lock").c_str(), O_CREAT | O_RDWR, 0644);
    flock(lock, LOCK_EX);
    if (!fs::exists(d + "/ready")) {
      auto must = [](const std::vector<std::string>& argv) {
        Result r = run(argv);
        if (r.status != 0) throw std::runtime_error("setup failed: " + r.err);
      };
      must({cli(), "synth", "--seed", "1", "--out", d + "/m.gguf"});
      // One forward case a file (the trials edit "the" case): no decode steps.
      const std::vector<std::string> cap = {cli(), "capture", "--model", d + "/m.gguf", "--random-tokens", "16", "--seed", "1",
                                            "--decode-steps", "0", "--quiet"};
      auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> v = cap;
        v.insert(v.end(), extra.begin(), extra.end());
        return v;
      };
      must(with({"--out", d + "/e.h5"}));
      must(with({"--precision", "f32", "--out", d + "/f32.h5"}));
      must(with({"--no-op-level", "--out", d + "/model_level.h5"}));
      std::ofstream(d + "/ready") << "ok\n";
    }
    flock(lock, LOCK_UN);
    close(lock);
    return d;
  }();
  return dir;
}

Scratch::Scratch(const std::vector<std::string>& inputs) {
  char t[] = "/tmp/mlaconf-rel-XXXXXX";
  dir = mkdtemp(t);
  for (const auto& n : inputs) {
    std::error_code ec;
    fs::create_hard_link(data_dir() + "/" + n, dir + "/" + n, ec);
    if (ec) fs::copy_file(data_dir() + "/" + n, dir + "/" + n);
  }
}

Scratch::~Scratch() {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

std::string Scratch::own(const std::string& n) const {
  fs::remove(p(n));
  fs::copy_file(data_dir() + "/" + n, p(n));
  return p(n);
}

void expect_refused(const Result& r, int code, const std::string& says, const std::string& dir,
                    const std::map<std::string, std::string>& before) {
  EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal << "; stderr: " << r.err;
  EXPECT_EQ(r.status, code) << r.err;
  EXPECT_EQ(lines(r.err), 1) << "stderr is not one line:\n" << r.err;
  const std::string prefix = code == 3 ? "mlaconf: not supported: " : "mlaconf: error: ";
  EXPECT_EQ(r.err.rfind(prefix, 0), 0u) << r.err;
  EXPECT_NE(r.err.find(says), std::string::npos) << "stderr does not say '" << says << "': " << r.err;
  EXPECT_EQ(snapshot(dir), before) << "the folder changed (a file left behind, or an input overwritten)";
}

void expect_each_refused(const std::vector<std::vector<std::string>>& commands, int code, const std::string& says,
                         const std::string& dir, const std::map<std::string, std::string>& before,
                         const Options& o, double max_seconds) {
  for (const auto& argv : commands) {
    std::string line;
    for (size_t i = 1; i < argv.size(); ++i) line += (i > 1 ? " " : "") + argv[i];
    SCOPED_TRACE(line);
    const Result r = run(argv, o);
    expect_refused(r, code, says, dir, before);
    if (max_seconds > 0) {
      EXPECT_LT(r.seconds, max_seconds);
    }
  }
}

bool h5py_edit(const std::string& file, const std::string& code) {
  const std::string cmd = "/usr/bin/python3 -c 'import h5py,sys; f=h5py.File(sys.argv[1],\"r+\"); c=[k for k in f.keys()][0]; " + code +
                          "; f.close()' '" + file + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace mlaconf::trial
