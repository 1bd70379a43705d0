// Test helper: runs `mlaconf` as a user would (a real process, real signals, real limits) and records
// what a trial must check: the exit code, stderr, and the files of the folder it ran in.
#pragma once
#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace mlaconf::trial {

struct Result {
  int status = -1;       // exit status, or -1 when killed by a signal
  int signal = 0;        // the signal that killed it (0: it exited)
  double seconds = 0;    // wall time
  std::string out, err;
};

struct Options {
  std::string cwd;                 // where it runs ("" = inherit)
  long long fsize_limit = -1;      // RLIMIT_FSIZE in bytes (-1 = none); SIGXFSZ stays default
  long long memory_limit = -1;     // RLIMIT_AS in bytes (-1 = none; not applied in an ASan build)
  double timeout_s = 60;           // killed (SIGKILL) past this: status -1, signal 9
  std::string stdout_path;         // stdout goes here (e.g. /dev/full) instead of Result::out
  // Called with the child's pid once a file whose name contains `wait_for` appears in `cwd` (inotify);
  // the child is stopped (SIGSTOP) first, so `on_file` acts while it is mid-write.
  std::string wait_for;
  std::function<void(pid_t)> on_file;
};

// argv[0] is the program; no shell is involved (paths may hold any byte).
Result run(const std::vector<std::string>& argv, const Options& o = {});

// Every regular file in `dir` (recursively, relative names) -> its content hash and size.
std::map<std::string, std::string> snapshot(const std::string& dir);

// The number of lines of `s` (a last line without '\n' counts).
int lines(const std::string& s);

}  // namespace mlaconf::trial
