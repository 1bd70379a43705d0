// `mlaconf kld --against RUN.json` (kld_against.h; docs/KLD.md "Against another engine's logprobs").
//
// The engine's run gives the prompt ids p[0..P) and its generated ids g[0..n) with each step's top-N
// logprobs. The reference in f64 runs ONE pass over p + g[0..n-1) (teacher-forced: the engine's own ids,
// whatever it sampled); step i is predicted by the row at position P - 1 + i, which attends to P + i keys.
// Where the run also gives the prompt's own rows (vLLM's prompt_logprobs, an echoed prompt), prompt token
// p >= 1 is judged at row p - 1 the same way: the engine's prefill, row by row, past top_k included.
// Per step: the top-N KLD (fixtures/logit_divergence.h topn_divergence), the same top-1, and where the top-1
// differs a class: near-tie (the truth's gap between its top-1 and the engine's <= the engine precision's
// margin), decision flip (not that, but the truth's row holds a discrete decision within the precision's
// tie gap: an indexer top-k or router top-k/group boundary in some layer), else failure.
#include "tools/kld_against.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

#include "core/argmax.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/json.h"
#include "core/model_config.h"
#include "core/text_escape.h"
#include "fixtures/engine_run.h"
#include "fixtures/logit_divergence.h"
#include "fixtures/row_verdict.h"
#include "fixtures/tolerances.h"
#include "tokenizer/tokenizer.h"
#include "tools/backend/all_logits.h"
#include "tools/backend/backend.h"
#include "tools/command.h"
#include "tools/kld_model.h"
#include "tools/text_file.h"
#include "tools/validate.h"

namespace mlaconf::cli {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct StepResult {
  bool prompt = false;  // a prompt row (step = the prompt token it predicts) or a generated step
  int64_t step = 0, position = 0;
  int32_t id = -1;
  TopNDivergence d;
  double truth_logprob = 0, engine_logprob = 0;
  be::RowDecisionGap nearest;  // the reference row's nearest discrete decision
  double truth_margin = 0;   // the truth's top-1 minus top-2 logit
  std::string cls;  // "" (same top-1), "near-tie", "decision-flip", "failure"
  bool beyond = false;
  bool over_row_kld = false;  // its KLD is above --max-row-kld
  // Over --max-row-kld, but its row holds a discrete decision within the precision's tie gap: an engine at that
  // precision may have taken the other branch, which moves the row by more than rounding (attributed, reported,
  // not failed; the same rule as a differing top-1's decision-flip class).
  bool row_kld_excused = false;
  bool failed() const { return cls == "failure" || (over_row_kld && !row_kld_excused); }
};

Json group_json(const std::vector<const StepResult*>& rows) {
  std::vector<double> kld, lperr;
  int64_t same = 0;
  std::map<std::string, int64_t> cls = {{"near-tie", 0}, {"decision-flip", 0}, {"failure", 0}};
  for (const StepResult* r : rows) {
    kld.push_back(r->d.kld);
    lperr.push_back(r->engine_logprob - r->truth_logprob);
    same += r->d.same_top;
    if (!r->cls.empty()) ++cls[r->cls];
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  const double p = n ? static_cast<double>(same) / n : std::nan("");
  const double sem = n > 1 ? std::sqrt(p * (1 - p) / (n - 1)) : 0.0;
  return {{"positions", n},
          {"kld", figure_json(figure_stats(kld))},
          {"same_top", {{"n", same}, {"p", p}, {"stderr", sem}}},
          {"differing_top", {{"near_tie", cls["near-tie"]}, {"decision_flip", cls["decision-flip"]}, {"failure", cls["failure"]}}},
          {"generated_logprob_error", figure_json(figure_stats(lperr))}};
}

Json step_json(const StepResult& r) {
  return {{"kind", r.prompt ? "prompt" : "generated"},
          {"step", r.step},
          {"position", r.position},
          {"keys", r.position + 1},
          {"beyond_topk", r.beyond},
          {"id", r.id},
          {"kld", r.d.kld},
          {"same_top", r.d.same_top},
          {"truth_top", r.d.truth_top},
          {"engine_top", r.d.engine_top},
          {"truth_gap", r.d.truth_gap},
          {"truth_topn_mass", r.d.truth_mass},
          {"engine_topn_mass", r.d.engine_mass},
          {"truth_logprob", r.truth_logprob},
          {"engine_logprob", r.engine_logprob},
          {"min_decision_gap", r.nearest.gap},
          {"nearest_decision", r.nearest.layer < 0 ? Json(nullptr) : Json({{"layer", r.nearest.layer}, {"dataset", r.nearest.dataset}})},
          {"class", r.cls.empty() ? Json(nullptr) : Json(r.cls)},
          {"over_row_kld", r.over_row_kld},
          {"row_kld_excused", r.row_kld_excused}};
}

}  // namespace

namespace {

// The engine's run, its token texts resolved through the model's vocabulary (a table built on first use: a file
// with ids everywhere never needs it).
EngineRun read_engine_run(const KldAgainstArgs& a, const tok::Tokenizer& tk, int64_t V) {
  std::multimap<std::string, int32_t> by_text;
  auto resolve = [&](const std::string& piece) {
    if (by_text.empty())
      for (int32_t id = 0; id < tk.n_vocab(); ++id) by_text.emplace(tk.token_bytes(id, tok::DecodeOptions{.special = true}), id);
    std::vector<int32_t> ids;
    if (piece.empty()) return ids;  // an empty text names no token (byte pieces decoded with errors ignored)
    auto [lo, hi] = by_text.equal_range(piece);
    for (auto it = lo; it != hi; ++it) ids.push_back(it->second);
    return ids;
  };
  return parse_engine_run(json_parse(read_text_file(a.against, "--against"), a.against), a.against, V, resolve);
}

// What every report prints beside its steps: the run's sizes, the precision's margin and tie gap, the truth.
struct Setup {
  int64_t P = 0, n = 0, V = 0, top_k = 0;  // prompt and generated tokens, vocabulary, the indexer's top_k
  double margin = 0, tie_gap = 0;
  std::string truth;  // the reference's description
  double seconds = 0;  // its pass
};

// One row: the top-N KLD and the truth's logprob of the engine's id at the row that predicts it, and the class
// of a differing top-1.
StepResult judge_row(const EngineStep& s, bool prompt, int64_t step, int64_t position, const be::LogitsAndGaps& tr, const Setup& u,
                     const KldCheck& check) {
  StepResult r;
  r.prompt = prompt;
  r.step = step;
  r.position = position;
  r.id = s.id;
  r.beyond = r.position >= u.top_k;  // the row attends to position + 1 keys; more than top_k: the indexer drops some
  const double* row = tr.logits.data() + r.position * u.V;
  r.d = topn_divergence(row, u.V, s.top);
  argmax_lower(row, static_cast<size_t>(u.V), &r.truth_margin);
  double m = -kInf, sum = 0;
  for (int64_t v = 0; v < u.V; ++v) m = std::max(m, row[v]);
  for (int64_t v = 0; v < u.V; ++v) sum += std::exp(row[v] - m);
  r.truth_logprob = row[s.id] - m - std::log(sum);
  r.engine_logprob = s.logprob;
  r.nearest = tr.nearest[static_cast<size_t>(r.position)];
  if (!r.d.same_top)
    r.cls = r.d.truth_gap <= u.margin ? "near-tie" : r.nearest.gap <= u.tie_gap ? "decision-flip" : "failure";
  r.over_row_kld = check.max_row_kld && !(r.d.kld <= *check.max_row_kld);
  r.row_kld_excused = r.over_row_kld && r.cls != "failure" && r.nearest.gap <= u.tie_gap;
  return r;
}

// Every judged row in position order: the prompt's rows (where the run gives them), then the generated steps.
std::vector<StepResult> judge_steps(const EngineRun& run, const be::LogitsAndGaps& tr, const Setup& u, const KldCheck& check) {
  std::vector<StepResult> res;
  for (size_t i = 0; i < run.prompt_steps.size(); ++i)
    res.push_back(judge_row(run.prompt_steps[i], true, static_cast<int64_t>(i) + 1, static_cast<int64_t>(i), tr, u, check));
  for (int64_t i = 0; i < u.n; ++i) res.push_back(judge_row(run.steps[static_cast<size_t>(i)], false, i, u.P - 1 + i, tr, u, check));
  return res;
}

// An engine that reports row p's distribution as prompt token p's (one row late: an echo off by one) agrees
// with the truth's NEXT row. The prompt rows' top-1 against the truth's top-1 in place and one row later (the
// next judged row's: the rows are in position order, and a generated step follows the last prompt row).
struct ShiftCheck {
  int64_t rows = 0, in_place = 0, one_later = 0;
  bool looks_shifted() const { return rows >= 4 && one_later > in_place && 2 * one_later >= rows; }
};
ShiftCheck shift_check(const std::vector<StepResult>& res) {
  ShiftCheck c;
  for (size_t k = 0; k + 1 < res.size(); ++k) {
    const StepResult& r = res[k];
    if (!r.prompt || res[k + 1].position != r.position + 1) continue;
    ++c.rows;
    c.in_place += r.d.same_top;
    c.one_later += res[k + 1].d.truth_top == r.d.engine_top;
  }
  return c;
}

// The rows grouped (all, the prompt's, the generated, within and beyond the indexer's top_k), the first
// divergences, the failing rows (classed failure, or over --max-row-kld) by position, and the verdict.
struct Summary {
  std::vector<const StepResult*> all, prompt, generated, within, beyond;
  const StepResult* first = nullptr;            // the first differing top-1, any row
  const StepResult* first_generated = nullptr;  // the first differing generated step
  int64_t failures = 0, over_row_kld = 0, row_kld_excused = 0;
  fx::RowVerdict rows;  // the failing rows, by position, with the diagnosis by position
  ShiftCheck shift;
  Json j_all;
  std::vector<std::string> violated;
  const char* verdict = "pass";
};
Summary summarize(const std::vector<StepResult>& res, const KldCheck& check, const ShiftCheck& shift, const Setup& u, int64_t T) {
  Summary m;
  std::vector<int64_t> failed;
  std::vector<char> judged(static_cast<size_t>(T), 0);
  for (const StepResult& r : res) {
    m.all.push_back(&r);
    (r.prompt ? m.prompt : m.generated).push_back(&r);
    (r.beyond ? m.beyond : m.within).push_back(&r);
    if (!m.first && !r.d.same_top) m.first = &r;
    if (!m.first_generated && !r.prompt && !r.d.same_top) m.first_generated = &r;
    m.failures += r.cls == "failure";
    m.over_row_kld += r.over_row_kld;
    m.row_kld_excused += r.row_kld_excused;
    judged[static_cast<size_t>(r.position)] = 1;
    if (r.failed()) failed.push_back(r.position);
  }
  m.rows = fx::rows_from_failures(failed, T, judged, fx::RowPositions{0, u.top_k});
  m.shift = shift;
  m.j_all = group_json(m.all);
  const double mean_kld = m.j_all.at("kld").at("mean").is_null() ? kInf : m.j_all.at("kld").at("mean").get<double>();
  const double max_kld = m.j_all.at("kld").at("max").is_null() ? kInf : m.j_all.at("kld").at("max").get<double>();
  const double same_top = m.j_all.at("same_top").at("p").get<double>();
  if (m.failures) m.violated.push_back(std::to_string(m.failures) + " differing top-1 classed failure");
  for (std::string& v : check.violations(mean_kld, same_top, "top-1 agreement")) m.violated.push_back(std::move(v));
  if (const int64_t n = m.over_row_kld - m.row_kld_excused; n > 0) {
    char b[160];
    std::snprintf(b, sizeof b, "%lld row(s) over --max-row-kld %g (Max KLD %g)", static_cast<long long>(n), *check.max_row_kld, max_kld);
    m.violated.push_back(b);
  }
  m.verdict = m.violated.empty() ? "pass" : "fail";
  return m;
}

// The failing rows in one object: positions as ranges, the diagnosis by position, the shift check.
Json rows_json(const Summary& m) {
  Json ranges = Json::array();
  for (const auto& [a, b] : m.rows.failed_ranges) ranges.push_back({a, b});
  return {{"failed", m.rows.rows_failed},
          {"judged", m.rows.rows_judged},
          {"over_row_kld", m.over_row_kld},
          {"over_row_kld_excused", m.row_kld_excused},
          {"positions", ranges},
          {"text", fx::row_ranges_text(m.rows.failed_ranges)},
          {"diagnosis", m.rows.diagnosis},
          {"prompt_shift", {{"rows", m.shift.rows}, {"same_top_in_place", m.shift.in_place}, {"same_top_one_row_later", m.shift.one_later},
                            {"looks_shifted", m.shift.looks_shifted()}}}};
}

// One line for a text report: the failing rows and why, or nothing when none fails and nothing looks shifted.
std::string rows_line(const Summary& m) {
  std::string line;
  if (m.rows.rows_failed)
    line = "failing rows (positions): " + fx::row_ranges_text(m.rows.failed_ranges) + " (" + std::to_string(m.rows.rows_failed) + " of " +
           std::to_string(m.rows.rows_judged) + ")" + (m.rows.diagnosis.empty() ? "" : ": " + m.rows.diagnosis);
  if (m.shift.looks_shifted())
    line += std::string(line.empty() ? "" : "; ") + "the engine's prompt rows agree with the reference ONE ROW LATER (" +
            std::to_string(m.shift.one_later) + " of " + std::to_string(m.shift.rows) + " top-1s, " + std::to_string(m.shift.in_place) +
            " in place): its logprobs for token p come from row p, not p - 1 (an echo off by one)";
  return line;
}

// `generate --against`: generate's report (kld_against.h).
void print_generate_report(const KldAgainstArgs& a, const EngineRun& run, const tok::Tokenizer& tk, const Setup& u,
                           const std::vector<StepResult>& res, const Summary& m) {
  auto cls = [](const std::string& c) {  // generate's class names
    std::string x = c;
    std::replace(x.begin(), x.end(), '-', '_');
    return x;
  };
  std::vector<int32_t> ref_tokens, eng_tokens;
  std::vector<double> ref_margins;
  Json eng_margins = Json::array(), divs = Json::array();
  for (const StepResult* rp : m.generated) {
    const StepResult& r = *rp;
    const EngineStep& s = run.steps[static_cast<size_t>(r.step)];
    ref_tokens.push_back(r.d.truth_top);
    ref_margins.push_back(r.truth_margin);
    eng_tokens.push_back(r.id);
    eng_margins.push_back(s.top.size() > 1 ? Json(s.top[0].logprob - s.top[1].logprob) : Json(nullptr));
    if (!r.d.same_top)
      divs.push_back({{"step", r.step}, {"reference_token", r.d.truth_top}, {"engine_token", r.d.engine_top},
                      {"reference_margin", r.truth_margin}, {"engine_margin", eng_margins.back()}, {"truth_gap", r.d.truth_gap},
                      {"beyond_topk", r.beyond}, {"class", cls(r.cls)}});
  }
  std::vector<int32_t> gen;
  for (const EngineStep& s : run.steps) gen.push_back(s.id);
  const std::string text = tk.decode(gen, tok::DecodeOptions{.special = false});
  if (a.json) {
    Json j = {{"prompt_ids", run.prompt},
              {"against", a.against},
              {"shape", run.shape},
              {"reference", {{"backend", u.truth}, {"tokens", ref_tokens}, {"margins", ref_margins}}},
              {"engine", {{"backend", run.engine.empty() ? run.shape : run.engine}, {"tokens", eng_tokens}, {"margins", eng_margins}, {"text", text}}},
              {"first_divergence", divs.empty() ? Json(nullptr) : divs[0]},
              {"divergences", divs},
              {"prompt_rows", m.prompt.empty() ? Json(nullptr) : group_json(m.prompt)},
              {"rows", rows_json(m)},
              {"engine_precision", a.engine_precision},
              {"margin", u.margin},
              {"tie_gap", u.tie_gap},
              {"verdict", m.verdict}};
    std::printf("%s\n", json_text(j, -1).c_str());
    return;
  }
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  if (!m.prompt.empty()) {
    const Json g = group_json(m.prompt);
    const Json& d = g.at("differing_top");
    std::fprintf(stderr, "generate: the prompt's %zu rows (%s): top-1 agreement %lld; differing: %lld near-ties, %lld decision flips, %lld failures\n",
                 m.prompt.size(), run.prompt_source.c_str(), g.at("same_top").at("n").get<long long>(), d.at("near_tie").get<long long>(),
                 d.at("decision_flip").get<long long>(), d.at("failure").get<long long>());
  }
  if (const std::string rl = rows_line(m); !rl.empty()) std::fprintf(stderr, "generate: %s\n", rl.c_str());
  const Json g = group_json(m.generated);
  if (!m.first_generated) {
    std::fprintf(stderr, "generate: the reference (on the engine's prefix) and the engine agree on all %lld steps: %s\n",
                 static_cast<long long>(u.n), m.verdict);
    return;
  }
  std::fprintf(stderr, "generate: first divergence at step %lld: reference %d (margin %.6g) vs engine %d: %s\n",
               static_cast<long long>(m.first_generated->step), m.first_generated->d.truth_top, m.first_generated->truth_margin,
               m.first_generated->d.engine_top, cls(m.first_generated->cls).c_str());
  std::fprintf(stderr, "generate: %zu divergent steps of %lld: %lld near-ties, %lld decision flips, %lld failures: %s\n",
               divs.size(), static_cast<long long>(u.n), g.at("differing_top").at("near_tie").get<long long>(),
               g.at("differing_top").at("decision_flip").get<long long>(), g.at("differing_top").at("failure").get<long long>(), m.verdict);
}

// `kld --against --json`: one object (docs/KLD.md).
void print_kld_json(const KldAgainstArgs& a, const EngineRun& run, const Setup& u, const std::vector<StepResult>& res,
                    const Summary& m) {
  Json steps = Json::array();
  for (const StepResult& r : res) steps.push_back(step_json(r));
  Json j = {{"model", a.model},
            {"against", a.against},
            {"shape", run.shape},
            {"engine", run.engine},
            {"truth", u.truth},
            {"prompt_tokens", u.P},
            {"generated_tokens", u.n},
            {"prompt_rows_source", run.prompt_source.empty() ? Json(nullptr) : Json(run.prompt_source)},
            {"top_n", run.steps[0].top.size()},
            {"ids_from_text", run.ids_from_text},
            {"index_topk", u.top_k},
            {"engine_precision", a.engine_precision},
            {"margin", u.margin},
            {"tie_gap", u.tie_gap},
            {"kld_definition", "top-N buckets + other, engine logprobs not renormalized"},
            {"all", m.j_all},
            {"generated", group_json(m.generated)},
            {"prompt", m.prompt.empty() ? Json(nullptr) : group_json(m.prompt)},
            {"within_topk", group_json(m.within)},
            {"beyond_topk", group_json(m.beyond)},
            {"rows", rows_json(m)},
            {"first_divergence", m.first ? step_json(*m.first) : Json(nullptr)},
            {"steps", steps},
            {"seconds", u.seconds},
            {"check", a.check.json(m.violated, m.verdict)}};
  std::printf("%s\n", json_text(j, -1).c_str());
}

// `kld --against`: a line per generated step and per prompt row that differs or fails (prompt rows are "p<token>"),
// the groups' figures, the failing rows, the first divergence and the verdict.
void print_kld_table(const KldAgainstArgs& a, const EngineRun& run, const Setup& u, const std::vector<StepResult>& res,
                     const Summary& m) {
  std::printf("kld --against %s: %s vs %s%s, %lld generated tokens after %lld prompt tokens%s, top-%zu\n", escape_text(a.against).c_str(),
              u.truth.c_str(), run.shape.c_str(), run.engine.empty() ? "" : (" (" + escape_text(run.engine) + ")").c_str(),
              static_cast<long long>(u.n), static_cast<long long>(u.P),
              run.prompt_steps.empty() ? "" : (" whose " + std::to_string(run.prompt_steps.size()) + " rows are judged too (" + run.prompt_source + ")").c_str(),
              run.steps[0].top.size());
  std::printf("precision %s: margin %g (logit), tie gap %g; KLD over the engine's top-N + other (nats)\n", a.engine_precision.c_str(),
              u.margin, u.tie_gap);
  std::printf("%-6s %-8s %-5s %-7s %-12s %-6s %-9s %-9s %-10s %s\n", "step", "position", "keys", "id", "KLD", "top1", "truth_top",
              "engine_top", "truth_gap", "class");
  for (const StepResult& r : res) {
    if (r.prompt && r.d.same_top && !r.over_row_kld) continue;
    const char* row_note = !r.over_row_kld ? "" : r.row_kld_excused ? " (over --max-row-kld; a decision near-tie in its row)" : " (over --max-row-kld)";
    const std::string step = (r.prompt ? "p" : "") + std::to_string(r.step);
    std::printf("%-6s %-8lld %-5lld %-7d %-12.6g %-6s %-9d %-9d %-10.4g %s%s\n", step.c_str(), static_cast<long long>(r.position),
                static_cast<long long>(r.position + 1), r.id, r.d.kld, r.d.same_top ? "same" : "DIFF", r.d.truth_top, r.d.engine_top,
                r.d.truth_gap, r.cls.empty() ? "-" : r.cls.c_str(), row_note);
  }
  std::vector<std::pair<const char*, Json>> groups = {{"all", m.j_all}};
  if (!m.prompt.empty()) groups.insert(groups.end(), {{"prompt rows", group_json(m.prompt)}, {"generated", group_json(m.generated)}});
  groups.insert(groups.end(), {{"<= index_topk keys", group_json(m.within)}, {"> index_topk keys", group_json(m.beyond)}});
  for (const auto& [title, g] : groups) {
    const Json& d = g.at("differing_top");
    std::printf("%-18s positions %lld: Mean KLD %.6g, Max KLD %.6g, top-1 agreement %lld/%lld; differing top-1: near-tie %lld, "
                "decision-flip %lld, failure %lld\n",
                title, g.at("positions").get<long long>(), g.at("kld").at("mean").is_null() ? std::nan("") : g.at("kld").at("mean").get<double>(),
                g.at("kld").at("max").is_null() ? std::nan("") : g.at("kld").at("max").get<double>(), g.at("same_top").at("n").get<long long>(),
                g.at("positions").get<long long>(), d.at("near_tie").get<long long>(), d.at("decision_flip").get<long long>(),
                d.at("failure").get<long long>());
  }
  const StepResult* first = m.first;
  if (first)
    std::printf("first divergence: %s %lld (position %lld, %s index_topk keys): truth top %d, engine top %d, truth gap %.4g: %s "
                "(the row's nearest decision tie: %.3g, layer %d %s)\n",
                first->prompt ? "prompt token" : "step", static_cast<long long>(first->step), static_cast<long long>(first->position),
                first->beyond ? "more than" : "at most",
                first->d.truth_top, first->d.engine_top, first->d.truth_gap, first->cls.c_str(), first->nearest.gap,
                first->nearest.layer, first->nearest.dataset.c_str());
  else
    std::printf("first divergence: none (every top-1 agrees)\n");
  if (const std::string rl = rows_line(m); !rl.empty()) std::printf("%s\n", rl.c_str());
  std::printf("check: %s", m.verdict);
  for (const std::string& v : m.violated) std::printf("; %s", v.c_str());
  std::printf("\nseconds: reference %.2f\n", u.seconds);
}

}  // namespace

void run_kld_against(const KldAgainstArgs& a) {
  // ---- arguments and input, before any work ----
  if (!fx::is_builtin_precision(a.engine_precision))
    throw InputError("kld: --engine-precision must be one of " + fx::builtin_precisions_text() + ", not '" + a.engine_precision + "'");
  a.check.validate();
  require_regular_file(a.against, "--against");
  const auto [f, c, tk] = open_kld_model(a.model);
  Setup u;
  u.V = c.n_vocab;
  const EngineRun run = read_engine_run(a, tk, u.V);
  u.P = static_cast<int64_t>(run.prompt.size());
  u.n = static_cast<int64_t>(run.steps.size());
  std::vector<int32_t> ids = run.prompt;
  for (int64_t i = 0; i + 1 < u.n; ++i) ids.push_back(run.steps[static_cast<size_t>(i)].id);
  const int64_t T = static_cast<int64_t>(ids.size());
  if (c.n_ctx_train > 0 && T > c.n_ctx_train)
    throw InputError(a.against + ": prompt and generated tokens need " + std::to_string(T) + " positions, beyond the model's context length " +
                     std::to_string(c.n_ctx_train));
  const fx::Tolerance tol = fx::tolerance(fx::TolClass::ExactIds, a.engine_precision);
  u.margin = tol.margin;
  u.tie_gap = tol.tie_gap;
  u.top_k = c.indexer_top_k;

  // ---- the reference in f64, one teacher-forced pass ----
  be::BackendOptions o;
  o.precision = "f64";
  o.max_ctx = T;
  std::unique_ptr<be::Backend> truth = be::make_backend("reference", f, c, o);
  u.truth = truth->describe();
  if (!a.json)
    std::fprintf(stderr, "%s --against: %s (%s%s), %lld prompt + %lld generated tokens, top-%zu logprobs; %s, one pass of %lld tokens\n",
                 a.generate_report ? "generate" : "kld", escape_text(a.against).c_str(), run.shape.c_str(),
                 run.engine.empty() ? "" : (", " + escape_text(run.engine)).c_str(), static_cast<long long>(u.P),
                 static_cast<long long>(u.n), run.steps[0].top.size(), u.truth.c_str(), static_cast<long long>(T));
  const auto t0 = std::chrono::steady_clock::now();
  const be::LogitsAndGaps tr = be::forward_all_logits_and_gaps(*truth, ids, u.V);
  u.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const std::vector<StepResult> res = judge_steps(run, tr, u, a.check);
  const Summary m = summarize(res, a.check, shift_check(res), u, T);
  if (a.generate_report) print_generate_report(a, run, tk, u, res, m);
  else if (a.json) print_kld_json(a, run, u, res, m);
  else print_kld_table(a, run, u, res, m);
  set_exit_code(m.violated.empty() ? kExitOk : kExitFail);
}

}  // namespace mlaconf::cli
