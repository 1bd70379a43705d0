// Test helper: real mlaconf processes for the robustness trials (see cli_trial.h).
#include "suites/robustness/cli_trial.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace mlaconf::trial {
namespace {

// The CLI under test is built with the same flags: under ASan it reserves terabytes of address space
// for its shadow at start, so an RLIMIT_AS would stop it before main() (the asan preset).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitizedBuild = true;
#else
constexpr bool kSanitizedBuild = false;
#endif
#else
constexpr bool kSanitizedBuild = false;
#endif

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

Result run(const std::vector<std::string>& argv, const Options& o) {
  char tmpl[] = "/tmp/mlaconf-trial-XXXXXX";
  const std::string io = mkdtemp(tmpl);
  const std::string out = io + "/out", err = io + "/err";
  int ino = -1;
  if (!o.wait_for.empty()) {
    ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    inotify_add_watch(ino, o.cwd.empty() ? "." : o.cwd.c_str(), IN_CREATE);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    if (!o.cwd.empty() && chdir(o.cwd.c_str()) != 0) _exit(127);
    const int fo = o.stdout_path.empty() ? open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644) : open(o.stdout_path.c_str(), O_WRONLY),
              fe = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fo, 1);
    dup2(fe, 2);
    const int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    // As from a terminal: default dispositions (a test runner may have ignored some).
    for (int sig : {SIGINT, SIGTERM, SIGXFSZ, SIGPIPE}) signal(sig, SIG_DFL);
    if (o.fsize_limit >= 0) {
      struct rlimit rl {static_cast<rlim_t>(o.fsize_limit), static_cast<rlim_t>(o.fsize_limit)};
      setrlimit(RLIMIT_FSIZE, &rl);
    }
    if (o.memory_limit >= 0 && !kSanitizedBuild) {
      struct rlimit rl {static_cast<rlim_t>(o.memory_limit), static_cast<rlim_t>(o.memory_limit)};
      setrlimit(RLIMIT_AS, &rl);
    }
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  Result r;
  int st = 0;
  bool fired = false;
  while (true) {
    const pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (ino >= 0 && !fired) {
      alignas(inotify_event) char buf[4096];
      const ssize_t n = read(ino, buf, sizeof buf);
      for (ssize_t i = 0; i < n;) {
        auto* ev = reinterpret_cast<inotify_event*>(buf + i);
        if (!fired && ev->len && std::string(ev->name).find(o.wait_for) != std::string::npos) {
          kill(pid, SIGSTOP);
          fired = true;
          if (o.on_file) o.on_file(pid);
          kill(pid, SIGCONT);
        }
        i += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      }
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > o.timeout_s) kill(pid, SIGKILL);
    usleep(200);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ino >= 0) close(ino);
  if (WIFEXITED(st)) r.status = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
  r.out = slurp(out);
  r.err = slurp(err);
  std::filesystem::remove_all(io);
  return r;
}

std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string rel = std::filesystem::relative(e.path(), dir).string();
    if (!e.is_regular_file()) {
      m[rel] = "(not a regular file)";
      continue;
    }
    const std::string s = slurp(e.path().string());
    m[rel] = std::to_string(s.size()) + ":" + std::to_string(std::hash<std::string>{}(s));
  }
  return m;
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  if (!s.empty() && s.back() != '\n') ++n;
  return n;
}

}  // namespace mlaconf::trial
