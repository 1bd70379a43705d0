// mlaconf tools/backend: the decisions of an existing fixture, served pass by pass to a run that must
// follow them (`capture --force-decisions FIXTURE`, see capture.h).
//
// A pass finds its decisions by what it runs: the prefill of `ids` takes the forward case whose
// input_ids are `ids` (layers/<l>/indexer_topk and router_ids of every layer the fixture holds); decode
// step s takes the decode case at position T+s-1; greedy step s takes row s of the greedy case's
// step_indexer_topk (every layer, in layer order) and step_router_ids (MoE layers, in layer order).
// A pass for which the fixture holds nothing runs on its own decisions (nullptr), and the case says so.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/decisions.h"
#include "core/model_config.h"
#include "fixtures/fixture_file.h"

namespace mlaconf::be {

class ForcedSource {
 public:
  // Opens the fixture and checks that it is of this model's dims (InputError otherwise).
  ForcedSource(const std::string& fixture, const ModelConfig& c, const std::string& model_path);
  const std::string& path() const { return path_; }

  // Decisions for the prefill of `ids`, or nullptr. `from` gets the case name.
  const ForcedDecisions* forward(const std::vector<int32_t>& ids, std::string* from);
  // Decisions for the decode pass at position `pos` after the prompt `ids`, or nullptr.
  const ForcedDecisions* decode(const std::vector<int32_t>& ids, int64_t pos, std::string* from);
  // The token the fixture's decode case at `pos` fed (-1 when none): a forced run feeds the same one.
  int32_t decode_token(const std::vector<int32_t>& ids, int64_t pos);
  // Decisions for greedy step `step` (>= 1: the decode pass after step-1 tokens) of the greedy case of
  // prompt `ids` and n_new tokens, or nullptr.
  const ForcedDecisions* greedy_step(const std::vector<int32_t>& ids, int64_t n_new, int64_t step, std::string* from);
  // The token the fixture's greedy case chose at `step`, or `own` when it holds none.
  int32_t greedy_token(const std::vector<int32_t>& ids, int64_t n_new, int64_t step, int32_t own);

 private:
  std::string find_case(const std::string& kind, const std::vector<int32_t>& ids, int64_t pos0, int64_t n_new);
  ForcedDecisions layer_decisions(const std::string& cs);
  fx::FixtureFile f_;
  std::string path_;
  ModelConfig c_;
  std::map<std::string, ForcedDecisions> cache_;  // by key (case + step)
};

}  // namespace mlaconf::be
