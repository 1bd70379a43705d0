// `mlaconf kld`: a corpus-level check of a backend's logits against the truth, in llama-perplexity's terms.
//
//   mlaconf kld --model M.gguf --backend reference|cuda --text-file corpus.txt [--ctx N] [--max-windows N]
//               [--precision f32|f64] (reference under test) [--fault NAME] [--devices 0,1,...] (cuda)
//               [--max-mean-kld X] [--min-same-top P] [--json]
//   mlaconf kld --model M.gguf --against RUN.json [--engine-precision bf16] [--max-mean-kld X] [--max-row-kld X] [--min-same-top P] [--json]
//               another engine's tokens and top-N logprobs (tools/kld_against.h)
//
// The text is encoded with the GGUF's own tokenizer (no special-token parsing: the corpus is plain text)
// and cut into consecutive windows of --ctx tokens (a bos first when the GGUF asks for one, in place of
// the window's first token, as llama-perplexity does; the tail shorter than a window is left over). Each
// window is ONE forward pass from an empty cache, through the truth (the reference in f64) and through
// the backend under test; at every position the two logits rows are compared (fixtures/logit_divergence.h):
// KL(P_truth || P_test), the same top token, Δp of the truth's top token and Δp of the corpus's next token.
// The figures are reported over all positions and over the positions at index >= index_topk of each
// window, the ones whose causal past exceeds the indexer's top-k, where sparse attention drops keys.
// Default --ctx: max(512, 2 x index_topk) capped at the context length (half of each window then lies
// beyond top-k; llama-perplexity scores the second half of each window). docs/KLD.md explains the figures.
//
// --fault: the backend under test runs a negative control: any of optimized/faults.h for cuda;
// dense-attention (the one fault the reference has) for the reference. The truth never gets it.
//
// Exit codes: 0 measured (and any --max-mean-kld / --max-row-kld / --min-same-top holds), 1 a given bound is violated,
// 2 bad input, 3 not supported (cuda without CUDA or without a device).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/json.h"
#include "core/model_config.h"
#include "fixtures/logit_divergence.h"
#include "tokenizer/tokenizer.h"
#include "tools/backend/all_logits.h"
#include "tools/backend/backend.h"
#include "tools/cli_devices.h"
#include "tools/settings.h"
#include "tools/command.h"
#include "tools/kld_against.h"
#include "tools/kld_check.h"
#include "tools/kld_model.h"
#include "tools/text_file.h"
#include "tools/validate.h"

namespace mlaconf::cli {
namespace {

struct KldArgs {
  std::string model, text_file, backend, precision = "f32", fault, devices, kernel_config;
  std::optional<int64_t> ctx;          // unset: the default (header)
  std::optional<int64_t> max_windows;  // unset: every whole window of the corpus
  KldCheck check;  // --max-mean-kld, --max-row-kld, --min-same-top
  bool precision_given = false;
  bool json = false;
  std::string against, engine_precision = "bf16";  // --against RUN.json: another engine's logprobs (kld_against.h)
};

// The default window: half of it beyond top-k, at least llama-perplexity's default context, within the model's.
int64_t default_ctx(const ModelConfig& c) {
  const int64_t want = std::max<int64_t>(512, 2 * c.indexer_top_k);
  return c.n_ctx_train > 0 ? std::min(want, c.n_ctx_train) : want;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- text output: the blocks and labels of llama-perplexity --kl-divergence -------------------------
// Values in %g (six significant digits) rather than llama-perplexity's fixed six decimals: the KLD of a
// correct backend is far below 1e-6 nats and would print as 0.
void print_kld_block(const DivergenceSummary& s) {
  const FigureStats& k = s.kld;
  std::printf("====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %12.6g ± %10.6g\n", k.mean, k.sem);
  std::printf("Maximum KLD: %12.6g\n", k.max);
  const struct { const char* label; double f; } rows[] = {
      {"99.9%   KLD", 0.999}, {"99.0%   KLD", 0.99}, {"95.0%   KLD", 0.95}, {"90.0%   KLD", 0.90}, {"Median  KLD", 0.5},
      {"10.0%   KLD", 0.10},  {" 5.0%   KLD", 0.05}, {" 1.0%   KLD", 0.01}, {" 0.1%   KLD", 0.001}};
  for (const auto& r : rows) std::printf("%s: %12.6g\n", r.label, k.percentile(r.f));
  std::printf("Minimum KLD: %12.6g\n", k.min);
}

void print_dp_block(const DivergenceSummary& s) {
  const FigureStats& d = s.dp_top;
  std::printf("====== Token probability statistics (Δp of the truth's top token) ======\n");
  std::printf("Mean    Δp: %10.6g ± %8.4g %%\n", 100 * d.mean, 100 * d.sem);
  std::printf("Maximum Δp: %10.6g%%\n", 100 * d.max);
  const struct { const char* label; double f; } rows[] = {
      {"99.9%   Δp", 0.999}, {"99.0%   Δp", 0.99}, {"95.0%   Δp", 0.95}, {"90.0%   Δp", 0.90},
      {"75.0%   Δp", 0.75},  {"Median  Δp", 0.5},  {"25.0%   Δp", 0.25}, {"10.0%   Δp", 0.10},
      {" 5.0%   Δp", 0.05},  {" 1.0%   Δp", 0.01}, {" 0.1%   Δp", 0.001}};
  for (const auto& r : rows) std::printf("%s: %10.6g%%\n", r.label, 100 * d.percentile(r.f));
  std::printf("Minimum Δp: %10.6g%%\n", 100 * d.min);
  std::printf("RMS Δp    : %10.6g ± %8.4g %%\n", 100 * d.rms, 100 * d.rms_sem);
  std::printf("Same top p: %10.6g ± %8.4g %%\n", 100 * s.same_top, 100 * s.same_top_sem);
  const FigureStats& n = s.dp_next;
  std::printf("-- Δp of the corpus's next token (llama-perplexity's Δp), %lld positions --\n", static_cast<long long>(n.n));
  std::printf("Mean    Δp: %10.6g ± %8.4g %%\n", 100 * n.mean, 100 * n.sem);
  std::printf("RMS Δp    : %10.6g ± %8.4g %%\n", 100 * n.rms, 100 * n.rms_sem);
}

void print_section(const char* title, const DivergenceSummary& s) {
  std::printf("\n#### %s: %lld positions", title, static_cast<long long>(s.positions));
  if (s.nonfinite_test_rows)
    std::printf(" (%lld rows of the backend under test hold NaN/inf: KLD inf there)", static_cast<long long>(s.nonfinite_test_rows));
  std::printf("\n");
  if (s.positions == 0) return;
  print_kld_block(s);
  std::printf("\n");
  print_dp_block(s);
}

void run(const KldArgs& a) {
  // ---- arguments, before any work ----
  if (a.backend != "reference" && a.backend != "cuda")
    throw InputError("kld: --backend must be reference or cuda, not '" + a.backend + "'");
  const bool cuda = a.backend == "cuda";
  require_fault_name(a.fault);
  const bool faulty = !a.fault.empty() && a.fault != "none";
  if (faulty && !cuda && a.fault != "dense-attention")
    throw InputError("kld: --fault " + a.fault + " is a fault of the CUDA pipeline; the reference has one, dense-attention");
  if (cuda && a.precision_given) throw InputError("kld: --precision is the reference backend's (the CUDA pipeline is f16)");
  const std::vector<int> devices = parse_devices(a.devices);
  if (!devices.empty() && !cuda) throw InputError("kld: --devices needs --backend cuda");
  if (!a.kernel_config.empty() && !cuda) throw InputError("kld: --kernel-config needs --backend cuda");
  const cuda::KernelConfig kernels = kernel_config(a.kernel_config);
  if (a.max_windows && *a.max_windows < 1) throw InputError("kld: --max-windows must be >= 1");
  a.check.validate();
  if (a.check.max_row_kld)
    throw InputError("kld: --max-row-kld needs --against: on a corpus a correct backend's flip at a near-tie reaches every later "
                     "row of its window through the cache, and no row of those could be attributed; bound the mean or the top-1 agreement");
  require_regular_file(a.text_file, "--text-file");

  const auto [f, c, tk] = open_kld_model(a.model);
  const int64_t top_k = c.indexer_top_k;
  const int64_t ctx = a.ctx ? *a.ctx : default_ctx(c);
  if (ctx <= top_k || ctx < 2)
    throw InputError("kld: --ctx " + std::to_string(ctx) + " must exceed the model's index top_k (" + std::to_string(top_k) +
                     "): the positions beyond it are where sparse attention drops keys");
  if (c.n_ctx_train > 0 && ctx > c.n_ctx_train)
    throw InputError("kld: --ctx " + std::to_string(ctx) + " exceeds the model's context length " + std::to_string(c.n_ctx_train));
  const std::string text = read_text_file(a.text_file, "--text-file");
  const std::vector<int32_t> corpus = tk.encode(text, {.add_bos = false, .parse_special = false});
  if (corpus.empty()) throw InputError(a.text_file + ": the text encodes to no tokens (empty corpus)");
  const int64_t whole = static_cast<int64_t>(corpus.size()) / ctx;
  if (whole == 0)
    throw InputError(a.text_file + ": the text encodes to " + std::to_string(corpus.size()) +
                     " tokens, fewer than one window of --ctx " + std::to_string(ctx));
  const int64_t n_win = a.max_windows ? std::min(whole, *a.max_windows) : whole;
  const bool add_bos = tk.add_bos_default();
  if (add_bos && tk.bos_id() < 0) throw InputError(a.model + ": tokenizer.ggml.add_bos_token is set but there is no bos token");

  // ---- backends: the one under test first, so that "not supported" comes before any reference work ----
  be::BackendOptions to;
  to.precision = cuda ? "f32" : a.precision;  // cuda ignores it
  to.fault = a.fault;
  to.max_ctx = ctx;
  to.devices = devices;
  to.kernels = kernels;
  std::unique_ptr<be::Backend> test = be::make_backend(a.backend, f, c, to);
  be::BackendOptions tr;
  tr.precision = "f64";
  tr.max_ctx = ctx;
  std::unique_ptr<be::Backend> truth = be::make_backend("reference", f, c, tr);

  if (!a.json)
    std::fprintf(stderr, "kld: %s against the truth %s: %lld windows of %lld tokens from %s (%zu tokens, %lld left over); "
                         "index_topk %lld\n",
                 test->describe().c_str(), truth->describe().c_str(), static_cast<long long>(n_win),
                 static_cast<long long>(ctx), a.text_file.c_str(), corpus.size(),
                 static_cast<long long>(static_cast<int64_t>(corpus.size()) - n_win * ctx), static_cast<long long>(top_k));

  // ---- the windows ----
  const int64_t V = c.n_vocab;
  std::vector<LogitDivergence> all, beyond;
  std::vector<double> window_mean_kld;
  double t_truth = 0, t_test = 0;
  for (int64_t w = 0; w < n_win; ++w) {
    std::vector<int32_t> ids(corpus.begin() + w * ctx, corpus.begin() + (w + 1) * ctx);
    if (add_bos) ids[0] = tk.bos_id();
    auto t0 = std::chrono::steady_clock::now();
    const std::vector<double> p = be::forward_all_logits(*truth, ids, V);
    t_truth += seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const std::vector<double> q = be::forward_all_logits(*test, ids, V);
    t_test += seconds_since(t0);
    std::vector<LogitDivergence> rows;
    for (int64_t i = 0; i < ctx; ++i) {
      const int32_t next = i + 1 < ctx ? ids[static_cast<size_t>(i + 1)] : -1;
      rows.push_back(logit_divergence(p.data() + i * V, q.data() + i * V, V, next));
      if (i >= top_k) beyond.push_back(rows.back());
    }
    const DivergenceSummary ws = summarize(rows);
    window_mean_kld.push_back(ws.kld.mean);
    all.insert(all.end(), rows.begin(), rows.end());
    if (!a.json)
      std::fprintf(stderr, "kld: window %lld/%lld (tokens %lld..%lld): Mean KLD %.6g, Same top p %.3f%%\n",
                   static_cast<long long>(w + 1), static_cast<long long>(n_win), static_cast<long long>(w * ctx),
                   static_cast<long long>((w + 1) * ctx - 1), ws.kld.mean, 100 * ws.same_top);
  }
  const DivergenceSummary s_all = summarize(all), s_beyond = summarize(beyond);

  // ---- the optional check: the bounds apply to all positions ----
  const std::vector<std::string> violated = a.check.violations(s_all.kld.mean, s_all.same_top, "Same top p");
  const bool checked = a.check.given();
  const char* verdict = !checked ? "measured" : violated.empty() ? "pass" : "fail";

  if (a.json) {
    Json j = {{"model", a.model},
              {"text_file", a.text_file},
              {"truth", truth->describe()},
              {"test", test->describe()},
              {"backend", test->name()},
              {"precision", test->precision()},
              {"fault", faulty ? Json(a.fault) : Json(nullptr)},
              {"ctx", ctx},
              {"windows", n_win},
              {"corpus_tokens", corpus.size()},
              {"tokens_left_over", static_cast<int64_t>(corpus.size()) - n_win * ctx},
              {"add_bos", add_bos},
              {"index_topk", top_k},
              {"all", summary_json(s_all)},
              {"beyond_topk", summary_json(s_beyond)},
              {"window_mean_kld", window_mean_kld},
              {"seconds", {{"truth", t_truth}, {"test", t_test}}},
              {"check", a.check.json(violated, verdict)}};
    std::printf("%s\n", json_text(j, -1).c_str());
  } else {
    std::printf("kld: %s vs %s, %lld windows x %lld tokens\n", test->describe().c_str(), truth->describe().c_str(),
                static_cast<long long>(n_win), static_cast<long long>(ctx));
    print_section("all positions", s_all);
    const std::string title = "positions >= index_topk (" + std::to_string(top_k) + ") of each window";
    print_section(title.c_str(), s_beyond);
    std::printf("\nseconds: truth %.2f, %s %.2f\n", t_truth, test->name().c_str(), t_test);
    if (checked) {
      std::printf("check: %s", verdict);
      for (const std::string& v : violated) std::printf("; %s", v.c_str());
      std::printf("\n");
    }
  }
  set_exit_code(violated.empty() ? kExitOk : kExitFail);
}

const CommandRegistration reg(55, [](CLI::App& root) {
  auto a = std::make_shared<KldArgs>();
  CLI::App* s = root.add_subcommand(
      "kld", "Corpus-level logits check: KL divergence, same top token and Δp of a backend against the reference f64, "
             "in llama-perplexity --kl-divergence terms");
  s->add_option("--model,-m", a->model, "GGUF model (any shard of a split model)")->required();
  CLI::Option* backend = s->add_option("--backend", a->backend, "the backend under test: reference or cuda")
                            ->check(CLI::IsMember({"reference", "cuda"}));
  CLI::Option* text = s->add_option("--text-file,-f", a->text_file, "the corpus: plain text, encoded with the GGUF's tokenizer");
  s->add_option("--ctx,-c", a->ctx, "tokens per window (default max(512, 2 x index_topk), capped at the context length)");
  s->add_option("--max-windows", a->max_windows, "use at most N windows (default: every whole window)");
  CLI::Option* prec = s->add_option("--precision", a->precision, "reference under test: f32 (default) or f64")
                          ->check(CLI::IsMember({"f32", "f64"}));
  s->add_option("--fault", a->fault,
                "negative control in the backend under test: any of optimized/faults.h (cuda), dense-attention (both)");
  s->add_option("--devices", a->devices, "cuda: layer split over these CUDA devices, e.g. 0,1 (0,0: virtual devices)");
  add_kernel_config_option(s, &a->kernel_config);
  s->add_option("--max-mean-kld", a->check.max_mean_kld, "a check: exit 1 when the Mean KLD (all positions, nats) exceeds X");
  s->add_option("--max-row-kld", a->check.max_row_kld,
                "with --against, a check: exit 1 when a row's KLD exceeds X nats and its row holds no decision near-tie "
                "(the report names those rows)");
  s->add_option("--min-same-top", a->check.min_same_top, "a check: exit 1 when Same top p (all positions) is below P percent");
  s->add_flag("--json", a->json, "print one JSON object (docs/KLD.md) instead of the text report");
  CLI::Option* against = s->add_option("--against", a->against,
                                       "another engine's run: prompt ids, generated tokens and top-N logprobs (OpenAI/vLLM, "
                                       "llama-cpp-python or llama.cpp server JSON; docs/KLD.md), judged against the reference f64 "
                                       "teacher-forced on the same ids; replaces --backend and --text-file");
  CLI::Option* eprec = s->add_option("--engine-precision", a->engine_precision,
                                     "--against: the engine's precision class (a built-in one of docs/TOLERANCES.md, default bf16): its margin "
                                     "and tie gap (docs/TOLERANCES.md) classify a differing top-1");
  s->callback([a, s, prec, backend, text, against, eprec] {
    a->precision_given = prec->count() > 0;
    if (against->count()) {
      for (const char* o : {"--backend", "--text-file", "--ctx", "--max-windows", "--precision", "--fault", "--devices", "--kernel-config"})
        if (s->get_option(o)->count()) throw InputError(std::string("kld: ") + o + " does not apply with --against (the engine's run is the test)");
      run_kld_against({a->model, a->against, a->engine_precision, a->check, a->json});
      return;
    }
    if (eprec->count()) throw InputError("kld: --engine-precision needs --against");
    if (!backend->count() || !text->count()) throw InputError("kld: --backend and --text-file are required (or --against RUN.json)");
    run(*a);
  });
});

}  // namespace
}  // namespace mlaconf::cli
