// mlaconf CLI: --devices parsing (see cli_devices.h).
#include "tools/cli_devices.h"

#include <sstream>

#include "core/error.h"

namespace mlaconf::cli {

std::vector<int> parse_devices(const std::string& s) {
  std::vector<int> out;
  if (s.empty()) return out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 0 || v > 1023)
      throw InputError("--devices: '" + item + "' is not a CUDA device ordinal (want e.g. 0,1 or 0,0)");
    out.push_back(static_cast<int>(v));
  }
  if (s.back() == ',') throw InputError("--devices: trailing comma in '" + s + "'");
  if (out.size() > 64) throw InputError("--devices: at most 64 entries");
  return out;
}

}  // namespace mlaconf::cli
