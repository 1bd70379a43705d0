// mlaconf: JSON conventions (see json.h).
#include "core/json.h"

#include "core/error.h"

namespace mlaconf {
namespace {
constexpr auto kReplace = nlohmann::ordered_json::error_handler_t::replace;

void one_line(const Json& j, std::string& o) {
  if (j.is_object()) {
    o += '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) o += ", ";
      first = false;
      o += Json(it.key()).dump(-1, ' ', false, kReplace);
      o += ": ";
      one_line(it.value(), o);
    }
    o += '}';
  } else if (j.is_array()) {
    o += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) o += ", ";
      one_line(j[i], o);
    }
    o += ']';
  } else {
    o += j.dump(-1, ' ', false, kReplace);  // the library writes every scalar (null for NaN/inf)
  }
}
}  // namespace

std::string json_text(const Json& j, int indent) {
  if (indent >= 0) return j.dump(indent, ' ', false, kReplace);
  std::string o;
  one_line(j, o);
  return o;
}

Json json_parse(const std::string& text, const std::string& what) {
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(what + ": invalid JSON: " + e.what());
  }
}

}  // namespace mlaconf
