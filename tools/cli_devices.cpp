// mlaconf CLI: --devices parsing (see cli_devices.h).
#include "tools/cli_devices.h"

#include "core/error.h"
#include "tools/validate.h"

namespace mlaconf::cli {

std::vector<int> parse_devices(const std::string& s) {
  if (s.empty()) return {};
  const std::vector<int64_t> v = parse_int_list(s, "--devices", 0, 1023, "a CUDA device ordinal (e.g. 0,1; a repeat is a virtual device)");
  if (v.size() > 64) throw InputError("--devices: at most 64 entries");
  return std::vector<int>(v.begin(), v.end());
}

}  // namespace mlaconf::cli
