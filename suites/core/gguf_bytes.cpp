#include "suites/core/gguf_bytes.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace mlaconf::testing_gguf {

std::string scratch_dir(const std::string& tag) {
  const char* t = std::getenv("TMPDIR");
  std::filesystem::path p = std::filesystem::path(t && *t ? t : "/tmp") /
                            ("mlaconf-" + tag + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

}  // namespace mlaconf::testing_gguf
