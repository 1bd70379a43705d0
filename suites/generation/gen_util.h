// suites/generation: shared pieces. The oracle's greedy case, the near-tie judgement, running the CLI
// without a shell (the prompt is long text), and a GGUF copy with changed metadata.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlaconf::gentest {

// A divergence where the ground truth's top-1 minus top-2 logit margin is at most this is a near-tie
// (logit units; the rule is the judge's, fx::judge_tokens). The reference (float32) is held to the
// judge's exact_ids class margin at f32 (fixtures/tolerances.h: 1e-3; measured on greedy200x24: 24 of 24
// steps equal, |margin - HF margin| <= 5.7e-6). The CUDA pipeline (f16 storage) is held to the f16 class
// margin, the number `mlaconf generate` and `compare` use for it.
double reference_near_tie_margin();
double cuda_near_tie_margin();

std::string shared_dir();
std::string tiny_model();   // ../shared/models/glm-dsa-tiny.gguf
std::string tiny_oracle();  // ../shared/models/glm-dsa-tiny.oracle.h5

// One greedy group of the oracle: the text prompt, HF's ids for it, HF's tokens and margins (float64).
struct GreedyCase {
  std::string text;
  std::vector<int32_t> input_ids, tokens;
  std::vector<double> margins;
};
GreedyCase read_greedy_case(const std::string& oracle, const std::string& group);

// The comparison of a run against the truth.
struct Judgement {
  int64_t compared = 0;              // steps compared
  int64_t equal = 0;                 // of which the tokens are equal
  std::vector<std::string> near_ties;  // divergences at truth margin <= the near-tie margin (recorded)
  std::vector<std::string> failures;   // divergences elsewhere
  bool failed() const { return !failures.empty(); }
  std::string summary() const;
};
// same_prefix: every step saw the truth's prefix (teacher forced), so every step is compared. Otherwise
// (free-running generation) the comparison ends at the first divergence: the contexts differ after it.
// Judged by fx::judge_tokens at `near_tie_margin`.
Judgement judge(const std::vector<int32_t>& got, const std::vector<double>& got_margins,
                const std::vector<int32_t>& want, const std::vector<double>& want_margins, bool same_prefix,
                double near_tie_margin);

// Runs argv[0] with argv (no shell); returns the exit code (-1: killed) and stdout / stderr.
int run_process(const std::vector<std::string>& argv, std::string* out, std::string* err);

// Minimal JSON readers for the CLI's one-line objects: the array / number / string / literal after
// "key": inside `json` (the first occurrence at or after `from`).
std::vector<double> json_numbers(const std::string& json, const std::string& key, size_t from = 0);
std::optional<std::string> json_string(const std::string& json, const std::string& key, size_t from = 0);
// The raw text of an object or array value {"key": {...}} / [...] (balanced brackets), or "null".
std::string json_object(const std::string& json, const std::string& key);

// Copies a GGUF (single file) to `out`, replacing metadata values as `edit` says: edit(key, value) may
// change the value, or return false to drop the key. Tensors are copied byte for byte.
struct GgufValueEdit {
  std::map<std::string, int64_t> set_int;  // keys set (or added) as int32
  std::vector<std::string> drop_prefix;    // keys starting with one of these are left out
};
void copy_gguf(const std::string& in, const std::string& out, const GgufValueEdit& edit);

// Registers a canonical case name as a gtest test of suite "generation" (refuses '-', '*', '?', ':').
void register_case(const std::string& name, std::function<void()> body);

std::string ids_csv(const std::vector<int32_t>& ids);

}  // namespace mlaconf::gentest
