#include "suites/core/synth_files.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>
#include <fstream>
#include <sstream>

#include "suites/core/gguf_bytes.h"
#include "synth/synth.h"

namespace mlaconf::testing_synth {
namespace {
// Folders of shared models, removed when the process exits (ctest runs one process per test).
struct Cleanup {
  std::vector<std::string> dirs;
  ~Cleanup() {
    for (const auto& d : dirs) std::filesystem::remove_all(d);
  }
};
Cleanup& cleanup() {
  static Cleanup c;
  return c;
}

// Model `o` written into a folder of its own (removed at exit); its first file.
std::string write_shared(const std::string& folder, const std::string& file, const synth::Options& o) {
  const std::string dir = testing_gguf::scratch_dir(folder);
  cleanup().dirs.push_back(dir);
  return synth::write_model(o, dir + "/" + file).front();
}
}  // namespace

const std::string& tiny_seed11() {
  static const std::string path = [] {
    synth::Options o;
    o.seed = 11;
    return write_shared("synth-shared", "tiny-seed11.gguf", o);
  }();
  return path;
}

const std::string& tiny_header_only() {
  static const std::string path = [] {
    synth::Options o;
    o.seed = 11;
    o.header_only = true;
    return write_shared("synth-shared-ho", "tiny-header-only.gguf", o);
  }();
  return path;
}

const std::string& tiny_ffs_seed37() {
  static const std::string path = [] {
    synth::Options o;
    o.seed = 37;
    o.config = with_dims(ModelConfig::tiny_default(), DimOverrides{.layers = 4, .top_k = 8, .indexer_types = "FFS"});
    return write_shared("synth-shared-ffs", "tiny-ffs-seed37.gguf", o);
  }();
  return path;
}

CmdResult run_cmd(const std::string& cmd) {
  static int counter = 0;
  const std::string dir = testing_gguf::scratch_dir("cmd" + std::to_string(counter++));
  const std::string full = cmd + " >" + dir + "/out 2>" + dir + "/err";
  CmdResult r;
  int st = std::system(full.c_str());
  if (st != -1 && WIFEXITED(st)) r.status = WEXITSTATUS(st);
  if (st != -1 && WIFSIGNALED(st)) r.signaled = true;
  auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  r.out = slurp(dir + "/out");
  r.err = slurp(dir + "/err");
  std::system(("rm -rf " + dir).c_str());
  return r;
}

std::string as_stored(ModelConfig want, const ModelConfig& got) {
  auto f = [](double& w, double g) {
    if (std::fabs(w - g) <= 1e-7 * std::fabs(w)) w = g;
  };
  f(want.rms_eps, got.rms_eps);
  f(want.rope_freq_base, got.rope_freq_base);
  f(want.expert_weights_scale, got.expert_weights_scale);
  f(want.rope_scaling_factor, got.rope_scaling_factor);
  f(want.rope_yarn_log_multiplier, got.rope_yarn_log_multiplier);
  return want.to_json();
}

}  // namespace mlaconf::testing_synth
