// `mlaconf generate`: greedy generation from a text prompt (or token ids), streamed as text.
//
//   mlaconf generate --model M.gguf --prompt "text" [-n N] [--backend reference|cuda|both]
//                    [--precision f32|f64] [--ignore-eos] [--verbose] [--json] [--fault NAME]
//                    [--devices 0,1,...]   (the CUDA pipeline's layer split, tools/cli_devices.h)
//   mlaconf generate --model M.gguf --prompt-ids 1,2,3 ...        (ids instead of text)
//   mlaconf generate --model M.gguf --against RUN.json [--engine-precision bf16] [--max-row-kld X] [--json]
//                    another engine's tokens and logprobs (tools/kld_against.h: the same run as kld --against)
//
// The prompt text is encoded with the GGUF's own tokenizer (tokenizer.ggml.*, no bos: GLM's
// add_bos_token is false; the GGUF's flag is honoured). The generated text goes to stdout token by
// token (TextStreamer: a character split over byte tokens appears when it is complete); the header,
// the per-step lines (--verbose: token, its text, top-1 minus top-2 logit margin) and the summary go
// to stderr. Generation stops after an end-of-generation token (eos/eot/eom) unless --ignore-eos.
//
// --backend both: the reference and the CUDA pipeline run side by side on the SAME prefix: at each
// step both see the prompt plus the reference's tokens so far, and each picks its argmax. So every
// step stays comparable after a first split. A step where they pick different tokens is a divergence;
// it is a near-tie when the reference margin is within the judge's greedy margin at the precision of the
// backend under test (fixtures/tolerances: the exact_ids class's margin, 0.1 logit for the CUDA pipeline's
// f16; the rule of fx::judge_tokens): recorded, exit 0. Any other
// divergence is a failure: exit 1. The first divergence is reported with both tokens and margins.
//
// Attribution (default with both; --no-attribution switches it off): a third run, the CUDA pipeline
// FORCED onto the reference's decisions at every pass (indexer top-k rows, router ids), runs beside them
// on the same prefix. Each divergence of the CUDA pipeline is then classified:
//   near_tie       the reference's final-logit margin is within that margin;
//   decision_flip  caused by an upstream decision taken the other way at a near-tie: the forced run
//                  agrees with the reference at that step (evidence: the first differing decision of
//                  the pipeline's own, with the reference's gap there);
//   failure        anything else (exit 1).
// --force-decisions: the backend under test IS the forced run (its own decisions are recorded and judged
// apart: a decision that differs where the reference's gap is not a near-tie fails); only near_tie and
// failure remain.
//
// --json prints one line, one object. Single backend: {"backend", "prompt_ids", "tokens", "margins",
// "text", "stop"} (tokens: generated only, an end-of-generation token included; text: their decoding
// without control tokens; stop: "eos" or "length"). Both: {"prompt_ids", "reference": {...},
// "cuda": {...}, "first_divergence": null | {"step", "reference_token", "cuda_token",
// "reference_margin", "cuda_margin", "near_tie"}, "divergences", "near_tie_margin", "verdict"};
// cuda.tokens[i] is the pipeline's pick given the reference's prefix.
//
// Exit codes: 0 ok (or only near-ties), 1 a real divergence (both), 2 bad input, 3 not supported
// (--backend cuda|both without CUDA in the build or without a device).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "tokenizer/streamer.h"
#include "tokenizer/tokenizer.h"
#include "core/argmax.h"
#include "fixtures/tolerances.h"
#include "tools/backend/backend.h"
#include "tools/backend/decision_trace.h"
#include "tools/cli_devices.h"
#include "tools/settings.h"
#include "tools/command.h"
#include "tools/kld_against.h"
#include "tools/validate.h"

namespace mlaconf::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt_ids;
  std::optional<std::string> prompt;  // text, encoded with the GGUF's tokenizer (set when given, even "")
  int64_t n = 16;
  std::string precision = "f32";
  std::string backend = "reference";
  std::string fault;
  double expert_cache_gib = 4.0;
  bool ignore_eos = false;
  bool verbose = false;
  bool json = false;
  bool force_decisions = false;
  bool no_attribution = false;
  std::string devices;  // layer split of the CUDA pipeline
  std::string kernel_config;  // --kernel-config (tools/settings.h)
};

// A decision of the backend under test that differs from the reference's where the reference's gap is
// larger than this (score units of the indexer / router) is not a near-tie: the judge's tie_gap at the
// backend's storage precision (fixtures/tolerances: 5e-3 for the CUDA pipeline's f16).
double decision_tie_gap(const be::Backend& b) { return fx::tolerance(fx::TolClass::Scores, b.precision()).tie_gap; }
// A token divergence where the reference's top-1 minus top-2 logit is at most this is a near-tie: the judge's
// greedy margin at the backend's precision (compare judges greedy cases with the same number).
double near_tie_margin(const be::Backend& b) { return fx::tolerance(fx::TolClass::ExactIds, b.precision()).margin; }
std::string fmt_bound(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2g", v);
  return b;
}

std::vector<int32_t> parse_ids(const std::string& s) {
  const std::vector<int64_t> v = parse_int_list(s, "generate: --prompt-ids", 0, INT32_MAX, "a token id");
  return std::vector<int32_t>(v.begin(), v.end());
}

// One backend's run: generated tokens, their margins, the text.
struct Stream {
  std::vector<int32_t> tokens;
  std::vector<double> margins;
  std::string text;
  std::string stop = "length";
  Json json(const std::string& backend) const {
    return {{"backend", backend}, {"tokens", tokens}, {"margins", margins}, {"text", text}, {"stop", stop}};
  }
};

Json flip_json(const be::DecisionDiff& f) {
  return {{"layer", f.layer}, {"kind", f.kind}, {"row", f.row}, {"reference_gap", f.gap}};
}

struct Divergence {
  int64_t step;
  int32_t ref_token, cuda_token;
  double ref_margin, cuda_margin;
  int32_t forced_token = -1;  // the forced run's pick at this step (-1: not run)
  be::DecisionDiff flip;      // the pipeline's first own decision that differs from the reference's (so far)
  double margin_bound = 0;    // near_tie_margin of the backend under test
  bool near_tie() const { return std::isfinite(ref_margin) && ref_margin <= margin_bound; }
  // near_tie | decision_flip | failure (see the header).
  std::string cls() const {
    if (near_tie()) return "near_tie";
    if (forced_token >= 0 && forced_token == ref_token) return "decision_flip";
    return "failure";
  }
  Json json() const {
    Json j = {{"step", step},           {"reference_token", ref_token}, {"cuda_token", cuda_token},
              {"reference_margin", ref_margin}, {"cuda_margin", cuda_margin}, {"near_tie", near_tie()},
              {"class", cls()}};
    if (forced_token >= 0) j["forced_token"] = forced_token;
    if (flip.found) j["first_decision_flip"] = flip_json(flip);
    return j;
  }
};

// A token's text for the --verbose lines (printable, quotes escaped).
std::string token_label(const tok::Tokenizer* t, int32_t id) {
  if (!t || id < 0 || id >= t->n_vocab()) return "";
  return " " + json_text(Json(t->token_text(id)), -1);
}

// The arguments that need no file: one line and exit 2 (or 3 for a fault the reference lacks) before the model
// is opened.
void check_args(const GenerateArgs& a) {
  if (a.prompt && !a.prompt_ids.empty()) throw InputError("generate: give --prompt (text) or --prompt-ids, not both");
  if (!a.prompt && a.prompt_ids.empty()) throw InputError("generate: give --prompt \"text\" or --prompt-ids 1,2,3");
  require_count(a.n, "generate: -n", 0);  // bounded before prompt + n (a sum past INT64_MAX passed the context check)
  if (a.backend != "reference" && a.backend != "cuda" && a.backend != "both")
    throw InputError("generate: --backend must be reference, cuda or both, not '" + a.backend + "'");
  require_fault_name(a.fault);  // a typo is unusable input (2), before "not supported" (3)
  require_gib(a.expert_cache_gib, "--expert-cache-gib");
}

// The prompt's ids and the tokenizer: required for a text prompt; with ids, used for the text when the GGUF has one.
struct Prompt {
  std::optional<tok::Tokenizer> tk;
  std::vector<int32_t> ids;
  const tok::Tokenizer* tokenizer() const { return tk ? &*tk : nullptr; }
};
Prompt read_prompt(const GenerateArgs& a, const GgufFile& f, const ModelConfig& c) {
  Prompt p;
  if (a.prompt) {
    p.tk.emplace(tok::Tokenizer::from_gguf(f));
  } else if (f.find("tokenizer.ggml.model")) {
    try {
      p.tk.emplace(tok::Tokenizer::from_gguf(f));
    } catch (const InputError& e) {
      std::fprintf(stderr, "mlaconf generate: no text output (%s)\n", e.what());
    }
  }
  if (a.prompt) {
    p.ids = p.tk->encode(*a.prompt, {.add_bos = p.tk->add_bos_default(), .parse_special = true});
    if (p.ids.empty()) throw InputError("generate: --prompt encodes to no tokens (empty text)");
  } else {
    p.ids = parse_ids(a.prompt_ids);
  }
  for (int32_t id : p.ids)
    if (id >= c.n_vocab)
      throw InputError(a.model + ": prompt token " + std::to_string(id) + " is outside the vocabulary (" +
                       std::to_string(c.n_vocab) + ")");
  if (p.tk && p.tk->n_vocab() > c.n_vocab)
    throw InputError(a.model + ": the tokenizer has " + std::to_string(p.tk->n_vocab()) +
                     " tokens, more than the model's vocabulary (" + std::to_string(c.n_vocab) + ")");
  return p;
}

// The backends of a run: the reference, the pipeline, and the pipeline forced onto the reference's decisions.
struct Backends {
  std::unique_ptr<be::Backend> ref, gpu, forced;
  be::Backend* test = nullptr;  // beside the reference: the pipeline itself, or (--force-decisions) its forced run
  be::Backend* lead = nullptr;  // whose tokens extend the prefix
};
// NotSupported (no CUDA here, YaRN in the pipeline): main() prints it and exits 3.
Backends open_backends(const GenerateArgs& a, const GgufFile& f, const ModelConfig& c, int64_t ctx,
                       const std::vector<int>& devices, const cuda::KernelConfig& kernels) {
  const bool use_ref = a.backend != "cuda", use_cuda = a.backend != "reference";
  Backends b;
  be::BackendOptions bo;
  bo.precision = a.precision;
  bo.expert_cache_gib = a.expert_cache_gib;
  bo.max_ctx = std::max<int64_t>(ctx, 1);
  bo.fault = a.fault;
  bo.devices = devices;
  bo.kernels = kernels;
  if (use_cuda && !a.force_decisions) b.gpu = be::make_backend("cuda", f, c, bo);
  if (use_cuda && use_ref && (a.force_decisions || !a.no_attribution)) b.forced = be::make_backend("cuda", f, c, bo);
  if (use_ref) {
    if (a.backend != "reference") bo.fault.clear();  // with both, the fault goes to the backend under test
    b.ref = be::make_backend("reference", f, c, bo);
  }
  b.test = a.force_decisions ? b.forced.get() : b.gpu.get();
  b.lead = b.ref ? b.ref.get() : b.test;
  return b;
}

// What the steps found: each backend's stream, the divergences and the decisions that differed.
struct Outcome {
  Stream lead_s, gpu_s;  // lead_s: the reference (or cuda alone); gpu_s: cuda beside the reference
  std::vector<Divergence> divs;
  be::DecisionDiff first_flip;    // the pipeline's first own decision that differs from the reference's
  int64_t decision_failures = 0;  // --force-decisions: own decisions differing outside near-ties
  int64_t real = 0, flips = 0;    // failures (divergences and decision failures) and decision flips
  const char* verdict = "agree";
};

// The greedy steps: every backend on the lead's prefix, the text streamed to stdout (but with --json).
Outcome generate_steps(const GenerateArgs& a, const Prompt& p, const Backends& b) {
  Outcome o;
  const tok::Tokenizer* tk = p.tokenizer();
  std::optional<tok::TextStreamer> streamer;
  if (tk) streamer.emplace(*tk, tok::DecodeOptions{.special = false});
  std::vector<int32_t> feed = p.ids;  // prefill first, then one token per step (incremental decode)
  for (int64_t step = 0; step < a.n; ++step) {
    double m = 0;
    be::DecisionTrace ref_dec;
    const int32_t t = argmax_lower(b.lead->forward(feed, b.ref ? &ref_dec : nullptr), &m);
    o.lead_s.tokens.push_back(t);
    o.lead_s.margins.push_back(m);
    double gm = 0;
    int32_t gt = -1, ft = -1;
    if (b.ref && b.test) {
      be::DecisionTrace own;
      gt = argmax_lower(b.test->forward(feed, &own, a.force_decisions ? &ref_dec.decisions() : nullptr), &gm);
      o.gpu_s.tokens.push_back(gt);
      o.gpu_s.margins.push_back(gm);
      const be::DecisionDiff d = be::first_decision_difference(ref_dec, own, decision_tie_gap(*b.test));
      if (d.found && !o.first_flip.found) o.first_flip = d;
      if (a.force_decisions) o.decision_failures += d.rows_outside_ties;
      if (b.forced && !a.force_decisions) ft = argmax_lower(b.forced->forward(feed, nullptr, &ref_dec.decisions()));
      if (gt != t) o.divs.push_back({step, t, gt, m, gm, ft, o.first_flip, near_tie_margin(*b.test)});
    }
    if (a.verbose) {
      std::fprintf(stderr, "\nstep %lld: token %d%s margin %.6g", static_cast<long long>(step), t, token_label(tk, t).c_str(), m);
      if (gt >= 0)
        std::fprintf(stderr, " | cuda %d%s margin %.6g%s", gt, token_label(tk, gt).c_str(), gm,
                     gt != t ? ("  <- divergence: " + o.divs.back().cls()).c_str() : "");
      if (ft >= 0) std::fprintf(stderr, " | forced %d", ft);
      std::fprintf(stderr, "\n");
    }
    if (!a.json) {
      std::fputs(streamer ? streamer->push(t).c_str() : ("[" + std::to_string(t) + "]").c_str(), stdout);
      std::fflush(stdout);
    }
    const bool end = tk && tk->is_end_of_generation(t);
    if (end && !a.ignore_eos) {
      o.lead_s.stop = "eos";
      break;
    }
    feed.assign(1, t);
  }
  if (!a.json && streamer) std::fputs(streamer->flush().c_str(), stdout);
  if (tk) {
    o.lead_s.text = tk->decode(o.lead_s.tokens, {.special = false});
    o.gpu_s.text = tk->decode(o.gpu_s.tokens, {.special = false});
  }
  o.gpu_s.stop = o.lead_s.stop;
  for (const Divergence& d : o.divs) {
    if (d.cls() == "failure") ++o.real;
    if (d.cls() == "decision_flip") ++o.flips;
  }
  o.real += o.decision_failures;
  o.verdict = o.real ? "fail" : o.divs.empty() ? "agree" : o.flips ? "decision-flip" : "near-tie";
  return o;
}

// --json: one line, one object (the header's schema).
void print_json(const GenerateArgs& a, const Prompt& p, const Backends& b, const Outcome& o) {
  Json j;
  if (b.ref && b.test) {
    Json dl = Json::array();
    for (const Divergence& d : o.divs) dl.push_back(d.json());
    j = {{"prompt_ids", p.ids},
         {"reference", o.lead_s.json(b.ref->describe())},
         {"cuda", o.gpu_s.json(b.test->describe())},
         {"first_divergence", o.divs.empty() ? Json(nullptr) : o.divs.front().json()},
         {"divergences", std::move(dl)},
         {"near_tie_margin", near_tie_margin(*b.test)},
         {"forced_decisions", a.force_decisions},
         {"attribution", b.forced != nullptr},
         {"decision_failures", o.decision_failures},
         {"first_decision_flip", o.first_flip.found ? flip_json(o.first_flip) : Json(nullptr)},
         {"verdict", o.verdict}};
  } else {
    // {"tokens", "margins"} is the contract suites/reference/test_cli_generate.cpp holds.
    j = {{"backend", b.lead->describe()}, {"prompt_ids", p.ids},   {"tokens", o.lead_s.tokens},
         {"margins", o.lead_s.margins},   {"text", o.lead_s.text}, {"stop", o.lead_s.stop}};
  }
  const std::string s = json_text(j, -1);
  std::printf("%s\n", s.c_str());
}

// Without --json: the summary on stderr, after the streamed text's last line.
void print_summary(const GenerateArgs& a, const Prompt& p, const Backends& b, const Outcome& o) {
  std::printf("\n");
  std::fflush(stdout);  // the text's last line before the summary on stderr
  double minm = 0;
  for (size_t i = 0; i < o.lead_s.margins.size(); ++i) minm = i ? std::min(minm, o.lead_s.margins[i]) : o.lead_s.margins[i];
  std::fprintf(stderr, "generate: %zu tokens (stop: %s), smallest margin %.4g\n", o.lead_s.tokens.size(), o.lead_s.stop.c_str(),
               minm);
  if (!b.ref || !b.test) return;
  const be::DecisionDiff& ff = o.first_flip;
  if (ff.found)
    std::fprintf(stderr, "generate: first own decision of cuda that differs from the reference's: layer %d %s row %lld "
                         "(reference gap %.3g)%s\n",
                 ff.layer, ff.kind.c_str(), static_cast<long long>(ff.row), ff.gap,
                 a.force_decisions ? " (forced: the reference's was used)" : "");
  if (o.decision_failures)
    std::fprintf(stderr, "generate: FAILURE: %lld own decisions differ where the reference's gap is above %.0e\n",
                 static_cast<long long>(o.decision_failures), decision_tie_gap(*b.test));
  if (o.divs.empty()) {
    std::fprintf(stderr, "generate: reference and cuda agree on all %zu steps\n", o.lead_s.tokens.size());
    return;
  }
  const Divergence* first = &o.divs.front();
  const tok::Tokenizer* tk = p.tokenizer();
  std::fprintf(stderr,
               "generate: first divergence at step %lld: reference %d%s (margin %.6g) vs cuda %d%s (margin "
               "%.6g): %s\n",
               static_cast<long long>(first->step), first->ref_token, token_label(tk, first->ref_token).c_str(),
               first->ref_margin, first->cuda_token, token_label(tk, first->cuda_token).c_str(), first->cuda_margin,
               first->near_tie()                   ? ("near-tie (reference margin <= " + fmt_bound(first->margin_bound) + ")").c_str()
               : first->cls() == "decision_flip" ? "decision flip upstream (the forced run agrees here)"
                                                  : "FAILURE");
  std::fprintf(stderr, "generate: %zu divergent steps of %zu: %lld decision flips, %lld failures: %s\n", o.divs.size(),
               o.lead_s.tokens.size(), static_cast<long long>(o.flips), static_cast<long long>(o.real), o.verdict);
}

void run(const GenerateArgs& a) {
  check_args(a);
  const bool use_cuda = a.backend != "reference";
  const std::vector<int> devices = parse_devices(a.devices);
  if (!devices.empty() && !use_cuda) throw InputError("generate: --devices needs --backend cuda or both");
  if (!a.kernel_config.empty() && !use_cuda) throw InputError("generate: --kernel-config needs --backend cuda or both");
  const cuda::KernelConfig kernels = kernel_config(a.kernel_config);
  const bool faulty = !a.fault.empty() && a.fault != "none";
  if (faulty && a.backend == "reference" && a.fault != "dense-attention")
    throw NotSupported("generate: the reference has one fault, dense-attention (not '" + a.fault + "')");
  require_regular_file(a.model, "--model");

  GgufFile f = GgufFile::open(a.model);
  ModelConfig c = ModelConfig::from_gguf(f);
  const Prompt p = read_prompt(a, f, c);
  const int64_t ctx = static_cast<int64_t>(p.ids.size()) + a.n;
  if (c.n_ctx_train > 0 && ctx > c.n_ctx_train)
    throw InputError(a.model + ": prompt (" + std::to_string(p.ids.size()) + ") + -n " + std::to_string(a.n) +
                     " exceeds the context length " + std::to_string(c.n_ctx_train));
  if (a.force_decisions && a.backend != "both") throw InputError("generate: --force-decisions needs --backend both");
  const Backends b = open_backends(a, f, c, ctx, devices, kernels);

  if (!a.json) {
    std::fprintf(stderr, "generate: %s%s%s%s, %zu prompt tokens, up to %lld new%s\n", b.lead->describe().c_str(),
                 b.test && b.ref ? " vs " : "", b.test && b.ref ? b.test->describe().c_str() : "",
                 a.force_decisions ? " on the reference's decisions" : b.forced ? " (+ a forced run for attribution)" : "",
                 p.ids.size(), static_cast<long long>(a.n), a.ignore_eos ? " (ignoring eos)" : "");
    if (a.prompt) std::fputs(a.prompt->c_str(), stdout);  // the continuation follows the prompt
    std::fflush(stdout);
  }
  const Outcome o = generate_steps(a, p, b);
  if (a.json) print_json(a, p, b, o);
  else print_summary(a, p, b, o);
  set_exit_code(o.real ? kExitFail : kExitOk);
}

const CommandRegistration reg(30, [](CLI::App& root) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* s = root.add_subcommand(
      "generate", "Greedy generation from a text prompt, streamed; --backend both checks CUDA against the reference");
  s->add_option("--model,-m", a->model, "GGUF model (any shard of a split model)")->required();
  auto text = std::make_shared<std::string>();
  CLI::Option* text_opt = s->add_option("--prompt", *text, "prompt text, encoded with the GGUF's tokenizer");
  s->add_option("--prompt-ids", a->prompt_ids, "prompt token ids, comma-separated (instead of --prompt)");
  s->add_option("-n,--n-new", a->n, "tokens to generate at most (default 16)");
  s->add_option("--precision", a->precision, "reference precision: f32 (default) or f64")
      ->check(CLI::IsMember({"f32", "f64"}));
  s->add_option("--backend", a->backend, "reference (default), cuda, or both (side by side, first divergence)")
      ->check(CLI::IsMember({"reference", "cuda", "both"}));
  s->add_option("--fault", a->fault,
                "negative control: inject a fault (dense-attention; cuda: any of optimized/faults.h) into the "
                "backend under test (cuda with both)");
  s->add_option("--expert-cache-gib", a->expert_cache_gib, "LRU budget for dequantized experts (default 4)");
  s->add_option("--devices", a->devices, "cuda: layer split over these CUDA devices, e.g. 0,1 (0,0: virtual devices)");
  add_kernel_config_option(s, &a->kernel_config);
  s->add_flag("--ignore-eos", a->ignore_eos, "do not stop at end-of-generation tokens (eos/eot/eom)");
  s->add_flag("--verbose,-v", a->verbose, "per-step token, text and margin (top-1 minus top-2 logit) on stderr");
  s->add_flag("--json", a->json, "print one JSON object {\"tokens\", \"margins\", \"text\", ...} (generated only)");
  s->add_flag("--force-decisions", a->force_decisions,
              "with both: the CUDA pipeline follows the reference's decisions at every step; its own are judged apart");
  s->add_flag("--no-attribution", a->no_attribution,
              "with both: no forced run beside the pipeline (a divergence that is not a near-tie is then a failure)");
  auto against = std::make_shared<KldAgainstArgs>();
  against->generate_report = true;
  CLI::Option* against_opt = s->add_option("--against", against->against,
                                            "another engine's run (RUN.json, docs/KLD.md): its tokens judged step by step against "
                                            "the reference f64 on the same prefix; replaces --prompt and --backend");
  CLI::Option* eprec = s->add_option("--engine-precision", against->engine_precision,
                                     "--against: the engine's precision class (default bf16) for the classes");
  CLI::Option* row_kld = s->add_option("--max-row-kld", against->check.max_row_kld,
                                       "--against: exit 1 when a row's KLD exceeds X nats and its row holds no decision near-tie "
                                       "(the prompt's rows too, where the run gives them; docs/KLD.md)");
  s->callback([a, s, text, text_opt, against, against_opt, eprec, row_kld] {
    if (against_opt->count()) {
      for (const char* o : {"--prompt", "--prompt-ids", "--n-new", "--precision", "--backend", "--fault", "--devices", "--kernel-config", "--force-decisions",
                            "--no-attribution", "--ignore-eos"})
        if (s->get_option(o)->count()) throw InputError(std::string("generate: ") + o + " does not apply with --against");
      against->model = a->model;
      against->json = a->json;
      run_kld_against(*against);
      return;
    }
    if (eprec->count()) throw InputError("generate: --engine-precision needs --against");
    if (row_kld->count()) throw InputError("generate: --max-row-kld needs --against");
    if (text_opt->count()) a->prompt = *text;
    run(*a);
  });
});

}  // namespace
}  // namespace mlaconf::cli
