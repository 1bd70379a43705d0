// `mlaconf bench`: prefill and decode throughput of a backend on a model.
//
//   mlaconf bench --model M.gguf [--backend reference|cuda] [--precision f32|f64]
//                 [--prompt-tokens 128] [--decode-steps 32] [--seed 1] [--no-warmup] [--json]
//                 [--devices 0,1,...]   (cuda: layer split, tools/cli_devices.h)
//
// Feeds --prompt-tokens seeded random ids as one prefill, then --decode-steps greedy steps of one
// token each, and reports wall time and tokens/s for both phases. By default a warm-up pass (the same
// prefill, then reset) runs first, so the timed prefill excludes one-time work: the reference's lazy
// dequantization on first use, the pipeline's uploads. A timing, not a check: it always exits 0 when it
// ran, 2 for bad input, 3 where the backend is not supported here.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/argmax.h"
#include "tools/backend/backend.h"
#include "tools/cli_devices.h"
#include "tools/command.h"
#include "tools/validate.h"

namespace mlaconf::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::string backend = "reference";
  std::string precision = "f32";
  int64_t prompt_tokens = 128;
  int64_t decode_steps = 32;
  uint64_t seed = 1;
  double expert_cache_gib = 4.0;
  bool no_warmup = false;
  bool json = false;
  std::string devices;  // layer split (cuda)
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run_bench(const BenchArgs& a) {
  if (a.backend != "reference" && a.backend != "cuda")
    throw InputError("bench: --backend must be reference or cuda, not '" + a.backend + "'");
  if (a.precision != "f32" && a.precision != "f64") throw InputError("bench: --precision must be f32 or f64");
  if (a.prompt_tokens < 1 || a.decode_steps < 0) throw InputError("bench: --prompt-tokens >= 1 and --decode-steps >= 0");
  require_finite_nonnegative(a.expert_cache_gib, "--expert-cache-gib");
  require_regular_file(a.model, "--model");
  const std::vector<int> devices = parse_devices(a.devices);
  if (!devices.empty() && a.backend != "cuda") throw InputError("bench: --devices needs --backend cuda");
  GgufFile f = GgufFile::open(a.model);
  ModelConfig c = ModelConfig::from_gguf(f);
  const int64_t ctx = a.prompt_tokens + a.decode_steps;
  if (ctx > c.n_ctx_train)
    throw InputError("bench: " + std::to_string(ctx) + " tokens exceed the model's context " + std::to_string(c.n_ctx_train));

  // NotSupported (no CUDA here): main() prints it and exits 3.
  be::BackendOptions bo;
  bo.precision = a.precision;
  bo.expert_cache_gib = a.expert_cache_gib;
  bo.max_ctx = ctx;
  bo.devices = devices;
  std::unique_ptr<be::Backend> b = be::make_backend(a.backend, f, c, bo);
  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(c.n_vocab - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(a.prompt_tokens));
  for (auto& t : prompt) t = pick(rng);

  double warm_s = 0;
  if (!a.no_warmup) {
    auto t0 = std::chrono::steady_clock::now();
    b->forward(prompt);
    b->reset();
    warm_s = seconds_since(t0);
  }
  auto t0 = std::chrono::steady_clock::now();
  std::vector<double> lg = b->forward(prompt);
  const double prefill_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < a.decode_steps; ++s) {
    const int32_t t = argmax_lower(lg);
    lg = b->forward(std::span<const int32_t>(&t, 1));
  }
  const double decode_s = seconds_since(t0);

  const double prefill_tps = a.prompt_tokens / prefill_s;
  const double decode_tps = a.decode_steps > 0 ? a.decode_steps / decode_s : 0.0;
  if (a.json) {
    const Json j = {{"backend", a.backend},     {"devices", a.devices},     {"precision", a.backend == "cuda" ? "f16" : a.precision},
                    {"model", a.model},         {"prompt_tokens", a.prompt_tokens},
                    {"decode_steps", a.decode_steps}, {"warmup_s", warm_s},
                    {"prefill_s", prefill_s},   {"prefill_tokens_per_s", prefill_tps},
                    {"decode_s", decode_s},     {"decode_tokens_per_s", decode_tps}};
    std::printf("%s\n", json_text(j, -1).c_str());
  } else {
    std::printf("backend   %s\nmodel     %s\n", b->describe().c_str(), a.model.c_str());
    if (!a.no_warmup) std::printf("warm-up   %.3f s (prefill + reset, not counted)\n", warm_s);
    std::printf("prefill   %lld tokens in %.3f s: %.1f tokens/s\n", static_cast<long long>(a.prompt_tokens), prefill_s,
                prefill_tps);
    if (a.decode_steps > 0)
      std::printf("decode    %lld steps in %.3f s: %.1f tokens/s (%.2f ms/token)\n", static_cast<long long>(a.decode_steps),
                  decode_s, decode_tps, 1e3 * decode_s / a.decode_steps);
  }
}

CommandRegistration reg(60, [](CLI::App& root) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* sub = root.add_subcommand("bench", "Prefill and decode throughput of a backend (a timing, not a check)");
  sub->add_option("--model", a->model, "GGUF model (any shard of a split model)")->required();
  sub->add_option("--backend", a->backend, "reference or cuda")->capture_default_str();
  sub->add_option("--precision", a->precision, "reference precision: f32 or f64 (cuda runs f16/f32)")->capture_default_str();
  sub->add_option("--prompt-tokens", a->prompt_tokens, "prefill length (seeded random ids)")->capture_default_str();
  sub->add_option("--decode-steps", a->decode_steps, "greedy decode steps after the prefill")->capture_default_str();
  sub->add_option("--seed", a->seed, "seed of the random prompt")->check(CLI::Range(int64_t{0}, INT64_MAX))->capture_default_str();
  sub->add_option("--expert-cache-gib", a->expert_cache_gib, "reference expert cache budget")->capture_default_str();
  sub->add_flag("--no-warmup", a->no_warmup, "time the first pass too (includes lazy weight loading)");
  sub->add_flag("--json", a->json, "one JSON object on stdout");
  sub->add_option("--devices", a->devices, "cuda: layer split over these CUDA devices, e.g. 0,1 (0,0: virtual devices)");
  sub->callback([a] { run_bench(*a); });
});

}  // namespace
}  // namespace mlaconf::cli
