// mlaconf tools/backend: the logits of EVERY position of one forward pass, from any backend.
//
// Backend::forward returns the last position's row only (what generation needs). A corpus-level check
// (`mlaconf kld`) needs them all: the pass runs with the head over every row (LayerRange::head_all_rows)
// and the model-level `logits` [T, vocab] is taken from the Trace, the one channel every backend
// reports through. Nothing else is recorded.
#pragma once
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "tools/backend/backend.h"

namespace mlaconf::be {

// Empties the backend's caches, runs `ids` at positions 0..T-1 and returns the logits [T, n_vocab]
// row-major. Throws std::runtime_error when the backend reports no logits of that shape.
std::vector<double> forward_all_logits(Backend& b, std::span<const int32_t> ids, int64_t n_vocab);

// A row's nearest discrete decision over all layers: the smallest indexer top-k, router top-k or router group
// gap the pass recorded for it (+inf where none), and where. Within a precision's tie gap, a correct
// implementation at that precision may take the other branch there (the judges attribute such rows).
struct RowDecisionGap {
  double gap = std::numeric_limits<double>::infinity();
  int layer = -1;
  std::string dataset;  // indexer_topk_gap | router_topk_gap | router_group_gap
};
struct LogitsAndGaps {
  std::vector<double> logits;           // [T, n_vocab]
  std::vector<RowDecisionGap> nearest;  // [T]
};
// The same pass, also recording each row's nearest decision (the reference records the gaps; a backend that
// records none leaves every row at +inf).
LogitsAndGaps forward_all_logits_and_gaps(Backend& b, std::span<const int32_t> ids, int64_t n_vocab);

}  // namespace mlaconf::be
