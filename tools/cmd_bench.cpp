// `mlaconf bench`: prefill and decode throughput of a backend on a model.
//
//   mlaconf bench --model M.gguf [--backend reference|cuda] [--precision f32|f64]
//                 [--prompt-tokens 128] [--decode-steps 32] [--seed 1] [--no-warmup] [--json]
//                 [--devices 0,1,...]   (cuda: layer split, tools/cli_devices.h)
//                 [--batch 1,8,32,64 [--context N] [--floor-gbs GBS] [--graph] [--step-by-step]]   (cuda: batched decode)
//
// Feeds --prompt-tokens seeded random ids as one prefill, then --decode-steps greedy steps of one
// token each, and reports wall time and tokens/s for both phases. By default a warm-up pass (the same
// prefill, then reset) runs first, so the timed prefill excludes one-time work: the reference's lazy
// dequantization on first use, the pipeline's uploads. A timing, not a check: it always exits 0 when it
// ran, 2 for bad input, 3 where the backend is not supported here (4 where --batch measured no copy bandwidth).
//
// --batch B1,B2,...: batched decode (the Backend's sequence API, tools/backend/backend.h), for each B in turn: B sequences,
// each given --context rows of synthetic cache (pattern values: decode at a long context without
// prefilling it) and a prefill of --prompt-tokens seeded random ids, then --decode-steps steps of all B
// together (one token each, greedy). Reports decode tokens/s (B x steps / time) and the latency of one
// step, with a floor: the bytes a step must read (every weight once, the experts B tokens pick under
// uniform routing, each sequence's top-k latent rows and indexer keys; tools/bench_floor.h) at the device's copy
// bandwidth, measured at the start (device-to-device copies of 256 MiB, the best of 5, read + write counted) and
// printed, or at --floor-gbs where given (to compare with a floor of another device). The overflow
// check is off in this mode (a server does not scan every op). The first step is timed apart (warm_ms).
// --graph: decode steps as CUDA graphs (BackendOptions::decode_graph; without --devices); every step up
// to the first replay (the capture's, normally the second) is timed apart too (warm_ms holds them all), so
// the timed steps are the graph's replays. The timed steps run as one decode_steps_greedy call: with --graph
// they are queued one step ahead, each step's picks fed to the next on the device, as a server's greedy
// decode loop can run (the host's download, tables and graph launch overlap the step before);
// --step-by-step waits for each step's picks before queuing the next (decode_step_greedy in a loop, the
// timing of v1-v11 in docs/perf/h200-2026-12-02.md), for comparison in one run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "core/argmax.h"
#include "tools/backend/backend.h"
#include "tools/bench_floor.h"
#include "tools/cli_devices.h"
#include "tools/settings.h"
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
  std::string kernel_config;  // --kernel-config (tools/settings.h)
  std::string batch;    // batched decode: list of B (cuda)
  int64_t context = 0;  // synthetic context rows per sequence (--batch)
  double floor_gbs = 0;     // bandwidth of the floor (0: the device's copy bandwidth, measured at the start)
  bool graph = false;       // --batch: decode steps as CUDA graphs
  bool step_by_step = false;  // --batch: each timed step waits for its picks before the next is queued
};

// The kernel config as a JSON object, key by key (optimized/kernel_config.h).
Json kernel_config_json(const cuda::KernelConfig& k) {
  Json j = Json::object();
  for (const auto& [key, v] : cuda::kernel_config_fields(k)) j[key] = v;
  return j;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One B of --batch: its sequences' prefill, the untimed steps, the timed ones; its row of the report.
struct BatchRow {
  double prefill_s = 0, warm_s = 0, decode_s = 0;
  int64_t untimed = 0, timed = 0;
};

BatchRow run_batch(const BenchArgs& a, be::Backend& b, int64_t B, std::mt19937_64& rng, std::uniform_int_distribution<int32_t>& pick) {
  const bool graph = b.decode_settings().decode_graph;
  std::vector<int> seqs;
  std::vector<int32_t> next((size_t)B);
  BatchRow r;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < B; ++i) {
    const int s = b.open_sequence();
    seqs.push_back(s);
    if (a.context > 0) b.append_synthetic_context(s, a.context, a.seed + (uint64_t)i);
    std::vector<int32_t> prompt((size_t)a.prompt_tokens);
    for (auto& t : prompt) t = pick(rng);
    next[(size_t)i] = argmax_lower(b.prefill(s, prompt));
  }
  r.prefill_s = seconds_since(t0);
  // Greedy picks made on the device (decode_step_greedy), as a server's greedy decode runs: scanning the
  // B x 154880 logits on the host cost 0.5 ms (B = 1) to 3 ms (B = 8) per step of host time, measured with
  // bench/gpu_trace.sh, during which the device idled.
  auto step = [&] { next = b.decode_step_greedy(seqs, next); };
  // Steps timed apart: the first (it allocates the kernels' scratch) and, with --graph, the capture (the
  // step after it captures the step, instantiates the graph and replays it once), so that the timed steps
  // are replays.
  const int64_t replays0 = b.graph_replays();
  t0 = std::chrono::steady_clock::now();
  if (a.decode_steps > 0) {
    step();
    ++r.untimed;
  }
  // With --graph, every step up to the first replay (the capture's): normally the second, later where a
  // workspace moved after the first (the pipeline then warms again).
  while (graph && r.untimed < a.decode_steps && b.graph_replays() == replays0) {
    step();
    ++r.untimed;
  }
  r.warm_s = seconds_since(t0);
  if (graph && b.graph_replays() == replays0)
    std::fprintf(stderr, "bench: B = %lld: the decode graph never replayed in %lld steps: no step was timed\n", (long long)B,
                 (long long)a.decode_steps);
  t0 = std::chrono::steady_clock::now();
  if (a.step_by_step) {
    for (int64_t st = r.untimed; st < a.decode_steps; ++st) step();
  } else if (r.untimed < a.decode_steps) {
    const auto picks = b.decode_steps_greedy(seqs, next, a.decode_steps - r.untimed);
    if ((int64_t)picks.size() < a.decode_steps - r.untimed)
      throw InputError("bench: B = " + std::to_string(B) + ": a decode step's logits were all NaN in a row (greedy pick -1)");
    next = picks.back();
  }
  r.decode_s = seconds_since(t0);
  r.timed = a.decode_steps - r.untimed;
  for (int s : seqs) b.close_sequence(s);
  return r;
}

void run_batch_bench(const BenchArgs& a, const GgufFile& f, const ModelConfig& c, const std::vector<int>& devices) {
  std::vector<int64_t> batches;
  for (const int64_t v : parse_int_list(a.batch, "bench: --batch", 1, 4096, "a batch size")) batches.push_back(v);
  if (a.context < 0) throw InputError("bench: --context must be >= 0");
  if (!(a.floor_gbs >= 0)) throw InputError("bench: --floor-gbs must be >= 0 (0: the measured copy bandwidth)");
  const int64_t ctx = a.context + a.prompt_tokens + a.decode_steps + 1;
  if (ctx > c.n_ctx_train)
    throw InputError("bench: " + std::to_string(ctx) + " rows exceed the model's context " + std::to_string(c.n_ctx_train));
  // NotSupported (no CUDA in the build or on the machine): main() prints it and exits 3. The bandwidth first, on
  // the first stage's device, before the pipeline takes its memory.
  const double copy_gbs = be::measure_copy_bandwidth_gbs(devices.empty() ? -1 : devices.front());
  if (!(copy_gbs > 0))  // exit 4
    throw std::runtime_error("bench: the measured copy bandwidth is " + std::to_string(copy_gbs) + " GB/s");
  const double floor_gbs = a.floor_gbs > 0 ? a.floor_gbs : copy_gbs;
  be::BackendOptions bo;
  bo.max_ctx = ctx;
  bo.devices = devices;
  bo.overflow_check = false;
  bo.kernels = kernel_config(a.kernel_config);
  if (a.graph) bo.kernels.decode_graph = true;
  bo.max_seqs = *std::max_element(batches.begin(), batches.end());
  std::unique_ptr<be::Backend> b = be::make_backend("cuda", f, c, bo);
  const be::DecodeSettings ds = b->decode_settings();
  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(c.n_vocab - 1));
  Json rows = Json::array();
  if (!a.json) {
    std::printf("backend   cuda%s, batched decode (overflow check off, CUDA graph %s, batch-invariant plan %s)\nmodel     %s\n",
                ds.split.empty() ? "" : (" (" + ds.split + ")").c_str(),
                !ds.decode_graph ? "off" : a.step_by_step ? "on, step by step" : "on, steps queued one ahead",
                ds.batch_invariant ? "on" : "off", a.model.c_str());
    std::printf("kernels   %s\n", cuda::to_string(bo.kernels).c_str());
    std::printf("device    copy bandwidth %.0f GB/s (measured: device-to-device copies, read + write counted)\n", copy_gbs);
    std::printf("context   %lld synthetic rows + %lld prompt tokens per sequence, %lld decode steps; floor at %.0f GB/s%s\n",
                (long long)a.context, (long long)a.prompt_tokens, (long long)a.decode_steps, floor_gbs,
                a.floor_gbs > 0 ? " (--floor-gbs)" : " (measured)");
    std::printf("%6s %10s %12s %12s %10s %12s %12s %8s\n", "batch", "prefill_s", "decode_tok/s", "step_ms", "warm_ms",
                "floor_ms", "floor_tok/s", "floor%");
  }
  for (int64_t B : batches) {
    const BatchRow r = run_batch(a, *b, B, rng, pick);
    const double tps = r.timed > 0 ? (double)(B * r.timed) / r.decode_s : 0.0;
    const double step_ms = r.timed > 0 ? 1e3 * r.decode_s / (double)r.timed : 0.0;
    const StepBytes sb = step_bytes(f.tensors(), c, B, a.context + a.prompt_tokens + a.decode_steps / 2);
    const ReadFloor fl = read_floor(sb, B, floor_gbs);
    rows.push_back(Json{{"batch", B}, {"greedy_pick", "device"}, {"steps_queued_ahead", ds.decode_graph && !a.step_by_step},
                        {"graph_replays_total", b->graph_replays()}, {"prefill_s", r.prefill_s}, {"warm_step_s", r.warm_s},
                        {"untimed_steps", r.untimed}, {"decode_steps_timed", r.timed}, {"decode_s", r.decode_s},
                        {"decode_tokens_per_s", tps}, {"step_ms", step_ms}, {"weight_bytes_per_step", sb.weights},
                        {"cache_bytes_per_step", sb.cache}, {"floor_ms_per_step", fl.ms_per_step},
                        {"floor_tokens_per_s", fl.tokens_per_s}, {"percent_of_floor", percent_of_floor(fl, step_ms)}});
    if (!a.json)
      std::printf("%6lld %10.3f %12.1f %12.3f %10.3f %12.3f %12.1f %7.1f%%\n", (long long)B, r.prefill_s, tps, step_ms,
                  1e3 * r.warm_s, fl.ms_per_step, fl.tokens_per_s, percent_of_floor(fl, step_ms));
  }
  if (a.json) {
    const Json j = {{"backend", "cuda"}, {"mode", "batched_decode"}, {"graph", ds.decode_graph}, {"batch_invariant", ds.batch_invariant}, {"kernel_config", kernel_config_json(bo.kernels)},
                    {"devices", a.devices}, {"model", a.model}, {"context", a.context}, {"prompt_tokens", a.prompt_tokens},
                    {"decode_steps", a.decode_steps}, {"copy_gbs_measured", copy_gbs}, {"floor_gbs", floor_gbs},
                    {"overflow_check", false}, {"batches", rows}};
    std::printf("%s\n", json_text(j, -1).c_str());
  }
}

void run_bench(const BenchArgs& a) {
  if (a.backend != "reference" && a.backend != "cuda")
    throw InputError("bench: --backend must be reference or cuda, not '" + a.backend + "'");
  if (a.precision != "f32" && a.precision != "f64") throw InputError("bench: --precision must be f32 or f64");
  // Each count bounded before any sum of them (a sum past INT64_MAX passed the context check).
  require_count(a.prompt_tokens, "bench: --prompt-tokens", 1);
  require_count(a.decode_steps, "bench: --decode-steps", 0);
  require_count(a.context, "bench: --context", 0);
  require_gib(a.expert_cache_gib, "--expert-cache-gib");
  require_regular_file(a.model, "--model");
  const std::vector<int> devices = parse_devices(a.devices);
  if (!devices.empty() && a.backend != "cuda") throw InputError("bench: --devices needs --backend cuda");
  if (!a.kernel_config.empty() && a.backend != "cuda") throw InputError("bench: --kernel-config needs --backend cuda");
  if (!a.batch.empty() && a.backend != "cuda") throw InputError("bench: --batch needs --backend cuda");
  if (a.batch.empty() && (a.context != 0 || a.graph)) throw InputError("bench: --context and --graph need --batch");
  if (a.graph && !a.devices.empty()) throw InputError("bench: --graph runs on one stage (no --devices)");
  if (a.step_by_step && a.batch.empty()) throw InputError("bench: --step-by-step needs --batch");
  GgufFile f = GgufFile::open(a.model);
  ModelConfig c = ModelConfig::from_gguf(f);
  if (!a.batch.empty()) return run_batch_bench(a, f, c, devices);
  const int64_t ctx = a.prompt_tokens + a.decode_steps;
  if (ctx > c.n_ctx_train)
    throw InputError("bench: " + std::to_string(ctx) + " tokens exceed the model's context " + std::to_string(c.n_ctx_train));

  // NotSupported (no CUDA here): main() prints it and exits 3.
  be::BackendOptions bo;
  bo.precision = a.precision;
  bo.expert_cache_gib = a.expert_cache_gib;
  bo.max_ctx = ctx;
  bo.devices = devices;
  bo.kernels = kernel_config(a.kernel_config);
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
    const Json j = {{"backend", a.backend},     {"devices", a.devices}, {"kernel_config", kernel_config_json(bo.kernels)},     {"precision", a.backend == "cuda" ? "f16" : a.precision},
                    {"model", a.model},         {"prompt_tokens", a.prompt_tokens},
                    {"decode_steps", a.decode_steps}, {"warmup_s", warm_s},
                    {"prefill_s", prefill_s},   {"prefill_tokens_per_s", prefill_tps},
                    {"decode_s", decode_s},     {"decode_tokens_per_s", decode_tps}};
    std::printf("%s\n", json_text(j, -1).c_str());
  } else {
    std::printf("backend   %s\nmodel     %s\n", b->describe().c_str(), a.model.c_str());
    if (a.backend == "cuda") std::printf("kernels   %s\n", cuda::to_string(bo.kernels).c_str());
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
  add_kernel_config_option(sub, &a->kernel_config);
  sub->add_option("--batch", a->batch, "cuda: batched decode of B sequences at once, for each B of a list, e.g. 1,8,32,64");
  sub->add_option("--context", a->context, "--batch: synthetic cache rows per sequence before its prompt (decode at long context)")
      ->capture_default_str();
  sub->add_option("--floor-gbs", a->floor_gbs, "--batch: bandwidth (GB/s) of the reported read floor (0: the copy bandwidth measured on the device)")
      ->capture_default_str();
  sub->add_flag("--graph", a->graph, "--batch: decode steps captured and replayed as CUDA graphs (one stage only)");
  sub->add_flag("--step-by-step", a->step_by_step,
                "--batch: each timed step waits for its greedy picks before the next is queued (no overlap)");
  sub->callback([a] { run_bench(*a); });
});

}  // namespace
}  // namespace mlaconf::cli
