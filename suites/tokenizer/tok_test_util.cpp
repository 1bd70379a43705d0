#include <stdexcept>
#include "suites/common/case_registry.h"
#include "tok_test_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <mutex>

#include "tokenizer/synthetic_vocab.h"

namespace tokt {

std::string shared_dir() { return MLACONF_SHARED_DIR; }
std::string tiny_gguf_path() { return shared_dir() + "/models/glm-dsa-tiny.gguf"; }
std::string tiny_oracle_path() { return shared_dir() + "/models/glm-dsa-tiny.oracle.h5"; }

bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

namespace {
struct TempDir {
  std::filesystem::path dir;
  TempDir() {
    dir = std::filesystem::temp_directory_path() / ("mlaconf_tok_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};
TempDir& temp_dir() {
  static TempDir d;
  return d;
}
}  // namespace

std::string temp_path(const std::string& name) { return (temp_dir().dir / name).string(); }

const mlaconf::tok::Tokenizer* tiny_tokenizer() {
  static std::once_flag once;
  static std::unique_ptr<mlaconf::tok::Tokenizer> t;
  std::call_once(once, [] {
    if (file_exists(tiny_gguf_path()))
      t = std::make_unique<mlaconf::tok::Tokenizer>(mlaconf::tok::Tokenizer::from_gguf_path(tiny_gguf_path()));
  });
  return t.get();
}

std::string synthetic_gguf_path(int64_t n_vocab) {
  static std::mutex mu;
  static std::map<int64_t, std::string> paths;
  std::lock_guard<std::mutex> lock(mu);
  auto it = paths.find(n_vocab);
  if (it != paths.end()) return it->second;
  mlaconf::GgufWriter w;
  w.set_string("general.architecture", "glm-dsa");
  mlaconf::tok::add_synthetic_tokenizer(w, n_vocab);
  std::string p = temp_path("synthetic_" + std::to_string(n_vocab) + ".gguf");
  w.write(p);
  paths[n_vocab] = p;
  return p;
}

const mlaconf::tok::Tokenizer& synthetic_tokenizer(int64_t n_vocab) {
  static std::mutex mu;
  static std::map<int64_t, std::unique_ptr<mlaconf::tok::Tokenizer>> cache;
  std::string p = synthetic_gguf_path(n_vocab);
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[n_vocab];
  if (!slot) slot = std::make_unique<mlaconf::tok::Tokenizer>(mlaconf::tok::Tokenizer::from_gguf_path(p));
  return *slot;
}

std::string write_tokenizer_copy(const mlaconf::GgufFile& src, const std::string& name, const std::vector<KeyEdit>& edits) {
  mlaconf::GgufWriter w;
  for (const auto& [key, value] : src.metadata()) {
    if (key.rfind("tokenizer.", 0) != 0 && key != "general.architecture") continue;
    bool skip = false;
    for (const auto& e : edits)
      if (e.key == key) skip = true;
    if (!skip) w.set_value(key, value);
  }
  for (const auto& e : edits)
    if (!e.remove) e.set(w);
  std::string p = temp_path(name);
  w.write(p);
  return p;
}

std::string run_command(const std::string& cmd, int* rc) {
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int st = ::pclose(f);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string to_hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

std::string from_hex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

std::string ids_string(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

void register_case(const std::string& suite, const std::string& name, std::function<void()> body) {
  // Pre-tokenizer names carry dashes ("llama-bpe"), which a gtest filter reads as its negative
  // patterns: test names spell them with '_'.
  std::string safe = name;
  for (char& c : safe)
    if (c == '-') c = '_';
  mlaconf::test::register_case(suite.c_str(), safe, std::move(body));
}

}  // namespace tokt
