// mlaconf: text from files and arguments made safe to print on a terminal.
//
// Paths, GGUF keys and strings, HDF5 case and dataset names are chosen by whoever made the file: printed
// raw, a newline splits a one-line message and an escape sequence drives the terminal. escape_text keeps
// printable ASCII and valid UTF-8 as they are and writes the rest visibly: \n, \r, \t, \xNN for other
// C0 controls, DEL and bytes that are not valid UTF-8, \u00NN for C1 controls (U+0080..U+009F; U+009B is a
// CSI to some terminals). A backslash stays a backslash.
#pragma once
#include <string>

namespace mlaconf {

std::string escape_text(const std::string& s);

}  // namespace mlaconf
