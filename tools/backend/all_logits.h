// mlaconf tools/backend: the logits of EVERY position of one forward pass, from any backend.
//
// Backend::forward returns the last position's row only (what generation needs). A corpus-level check
// (`mlaconf kld`) needs them all: the pass runs with the head over every row (LayerRange::head_all_rows)
// and the model-level `logits` [T, vocab] is taken from the Trace, the one channel every backend
// reports through. Nothing else is recorded.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "tools/backend/backend.h"

namespace mlaconf::be {

// Empties the backend's caches, runs `ids` at positions 0..T-1 and returns the logits [T, n_vocab]
// row-major. Throws std::runtime_error when the backend reports no logits of that shape.
std::vector<double> forward_all_logits(Backend& b, std::span<const int32_t> ids, int64_t n_vocab);

}  // namespace mlaconf::be
