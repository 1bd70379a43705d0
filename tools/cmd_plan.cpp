// `mlaconf plan`: the memory plan of a layer split over N devices, from the GGUF header only.
//
//   mlaconf plan --model M.gguf --devices 8 --memory-per-device 96 [--context 32768] [--batch 1]
//                [--ubatch 512] [--reserve 1] [--pass-arena 1] [--json]
//
// Assigns contiguous layer ranges to the devices by bytes (core/memory_plan.h: quantized weights as
// stored, latent and indexer key caches at the context and batch, the CUDA pipeline's scratch for a
// pass of --ubatch tokens, the embedding on the first device and the output head on the last),
// minimising the largest device. Prints a table (or one JSON object with --json) and exits 0 when every
// device fits; otherwise one line `mlaconf: error: ... does not fit ...` with what each device would
// need, and exit 2 (with --json the object, "fits": false, is printed first). No tensor data is read.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/gguf.h"
#include "core/memory_plan.h"
#include "core/model_config.h"
#include "tools/command.h"

namespace mlaconf::cli {
namespace {

struct PlanArgs {
  std::string model;
  int devices = 1;
  double memory_gib = 0;
  int64_t context = 4096;
  int64_t batch = 1;
  int64_t ubatch = 512;
  double reserve_gib = 1.0;
  double pass_arena_gib = double(kPassArenaDefaultBytes) / double(uint64_t{1} << 30);  // the pipeline's default
  bool json = false;
};

uint64_t gib_to_bytes(double g, const char* what) {
  if (!std::isfinite(g) || g < 0 || g > 1e6) throw InputError(std::string("plan: ") + what + " must be between 0 and 1e6 GiB");
  return static_cast<uint64_t>(g * double(uint64_t{1} << 30));
}

void run(const PlanArgs& a) {
  if (a.memory_gib <= 0) throw InputError("plan: --memory-per-device must be > 0 (GiB)");
  MemoryPlanRequest r;
  r.n_devices = a.devices;
  r.memory_per_device = gib_to_bytes(a.memory_gib, "--memory-per-device");
  r.context = a.context;
  r.batch = a.batch;
  r.ubatch = a.ubatch;
  r.reserve_per_device = gib_to_bytes(a.reserve_gib, "--reserve");
  r.pass_arena_per_device = gib_to_bytes(a.pass_arena_gib, "--pass-arena");
  GgufFile f = GgufFile::open(a.model);
  ModelConfig c = ModelConfig::from_gguf(f);
  c.validate(a.model);
  if (c.n_ctx_train > 0 && a.context > c.n_ctx_train)
    throw InputError("plan: --context " + std::to_string(a.context) + " exceeds the model's context length " +
                     std::to_string(c.n_ctx_train));
  const MemoryPlan p = plan_memory(f, c, r);
  if (a.json) {
    std::printf("%s\n", p.json().c_str());
  } else if (p.fits) {
    std::printf("plan: %s on %d x %s, context %lld, batch %lld, ubatch %lld (%lld layers)\n", a.model.c_str(), a.devices,
                format_gib(r.memory_per_device).c_str(), static_cast<long long>(a.context), static_cast<long long>(a.batch),
                static_cast<long long>(a.ubatch), static_cast<long long>(c.n_layer_run()));
    std::printf("%s", p.table().c_str());
  }
  if (!p.fits)
    throw InputError(a.model + " does not fit " + std::to_string(a.devices) + " x " + format_gib(r.memory_per_device) +
                     " at context " + std::to_string(a.context) + ", batch " + std::to_string(a.batch) +
                     ": the balanced split needs " + p.needs() + "; " + format_gib(p.total()) + " in all");
  set_exit_code(kExitOk);
}

CommandRegistration reg(35, [](CLI::App& root) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* s = root.add_subcommand("plan", "Memory plan of a layer split over N devices (reads the GGUF header only)");
  s->add_option("--model,-m", a->model, "GGUF model (any shard of a split model; a header-only synth file works)")->required();
  s->add_option("--devices", a->devices, "number of devices")->required()->check(CLI::Range(1, 1024));
  s->add_option("--memory-per-device", a->memory_gib, "memory of each device, GiB")->required();
  s->add_option("--context", a->context, "cache rows per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  s->add_option("--batch", a->batch, "sequences (the caches scale with it)")->capture_default_str()->check(CLI::PositiveNumber);
  s->add_option("--ubatch", a->ubatch, "tokens per forward pass (sizes the scratch)")->capture_default_str()->check(CLI::PositiveNumber);
  s->add_option("--reserve", a->reserve_gib, "GiB per device for the CUDA context and cuBLAS")->capture_default_str();
  s->add_option("--pass-arena", a->pass_arena_gib, "GiB per device for the CUDA pipeline's per-pass arena (its cap)")
      ->capture_default_str();
  s->add_flag("--json", a->json, "one JSON object on stdout");
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace mlaconf::cli
