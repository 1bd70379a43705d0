// mlaconf CLI: the bytes of a text file (text_file.h).
#include "tools/text_file.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tools/validate.h"

namespace mlaconf::cli {

std::string read_text_file(const std::string& path, const std::string& option) {
  require_regular_file(path, option);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the text file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError(path + ": read error");
  return ss.str();
}

}  // namespace mlaconf::cli
