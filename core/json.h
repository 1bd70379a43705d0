// mlaconf: the one JSON library (nlohmann-json) and the project's conventions for it.
//
// Every JSON document mlaconf reads or writes goes through here:
//   - numbers are written by the library in their shortest form that parses back to the same double;
//   - non-finite numbers (NaN, +-inf) are written as null (JSON has no such numbers);
//   - strings that are not valid UTF-8 (a path with a Latin-1 byte, say) have each invalid byte
//     replaced by U+FFFD, so the document is valid JSON whatever the input held.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace mlaconf {

using Json = nlohmann::ordered_json;  // keys keep the order they were set in

// The document as text. indent >= 0: the library's pretty form; indent < 0: one line, with ", " and
// ": " separators (what the one-object stdout outputs print). Ends without a newline.
std::string json_text(const Json& j, int indent = 2);

// Parses `text`; throws InputError "<what>: invalid JSON: ..." on a syntax error.
Json json_parse(const std::string& text, const std::string& what);

}  // namespace mlaconf
