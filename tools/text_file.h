// mlaconf CLI: the bytes of a text file given as an option (--text-file), as they are.
#pragma once
#include <string>

namespace mlaconf::cli {

// Checks `path` is a regular file (require_regular_file) and returns its bytes. InputError (exit 2, one
// line naming the file) when it cannot be opened or read.
std::string read_text_file(const std::string& path, const std::string& option);

}  // namespace mlaconf::cli
