// mlaconf: forced decisions (see decisions.h).
#include "core/decisions.h"

#include <stdexcept>
#include <string>

namespace mlaconf {

const int32_t* ForcedDecisions::find(const std::map<int, std::vector<int32_t>>& m, int layer, int64_t rows, int64_t width) {
  auto it = m.find(layer);
  if (it == m.end()) return nullptr;
  if (static_cast<int64_t>(it->second.size()) != rows * width)
    throw std::invalid_argument("forced decisions of layer " + std::to_string(layer) + ": " + std::to_string(it->second.size()) +
                                " values, the pass needs " + std::to_string(rows) + " x " + std::to_string(width));
  return it->second.data();
}

}  // namespace mlaconf
