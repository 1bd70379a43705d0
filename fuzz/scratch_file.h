// mlaconf fuzz: the one scratch file per fuzzer process that each input is written to (the readers under test
// open paths, not buffers), in /dev/shm when it exists (no disk I/O per input), removed at exit.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mlaconf::fuzz {

// Writes the input to this process's scratch file "mlaconf-fuzz-PID<ext>" and returns its path. The name
// is fixed on the first call (one target, one extension).
inline const std::string& write_scratch(const uint8_t* data, size_t size, const char* ext) {
  static const std::string p = [ext] {
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
    return std::string(base) + "/mlaconf-fuzz-" + std::to_string(getpid()) + ext;
  }();
  static const struct RemoveAtExit {
    ~RemoveAtExit() { std::remove(p.c_str()); }
  } remove_at_exit;
  FILE* f = std::fopen(p.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return p;
}

}  // namespace mlaconf::fuzz
