// mlaconf tools/backend: the ops of one layer that `mlaconf answer` replays, in forward order, with the
// fixture datasets each one reads and writes: derived from the op registry (core/op_registry.h, columns
// replay_inputs / replay_moe_inputs / computed_by). Each op runs on the EXPECTED fixture's own inputs, so
// nothing compounds, and the recorded decisions are used downstream (attention reads the given
// indexer_topk, the experts the given router_ids).
//
// latent_cache is a concatenation ([kv_latent | k_pe_rope]), not an op. Decode cases hold the whole
// cache in latent_cache / indexer_k ([S, ...]); the op writing indexer_k answers the pass's T new rows
// and keeps the S - T earlier rows of the input it was given (answered by the earlier cases).
#pragma once
#include <vector>

#include "core/op_registry.h"

namespace mlaconf::be {

using OpSpec = ReplayOp;
// Forward order within a layer (the order `compare` names the first failing op in).
inline const std::vector<OpSpec>& op_table() { return replay_ops(); }

}  // namespace mlaconf::be
