// mlaconf capture --model M.gguf --layers 0,3,40|all (--prompt-ids ... | --random-tokens N --seed S)
//                 [--decode-steps K] [--generate N] [--precision f32|f64] [--case-name NAME]
//                 [--backend reference|cuda [--devices 0,1,...]] [--hidden-source forward|synthetic] [--quiet|--progress] --out F.h5
//
// Writes a golden fixture (fixtures/SCHEMA.md) atomically. Exit 2 on bad input, 3 for an unsupported
// backend.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "tools/backend/capture.h"
#include "tools/backend/backend.h"
#include "tools/cli_devices.h"
#include "tools/command.h"
#include "tools/settings.h"
#include "tools/validate.h"

namespace mlaconf::cli {
namespace {

struct CaptureArgs {
  be::CaptureOptions o;
  std::string layers = "all", prompt_ids, backend = "reference", op_layers, devices, kernel_config;
  bool quiet = false, progress = false, no_op_level = false;
  int64_t decode_steps = -1;  // -1: the default (kDefaultDecodeSteps)
};

// Decode steps a capture takes unless told otherwise. A decode step's row attends the whole cache, so on
// a prompt longer than top_k it is where the indexer's selection matters most; a second step reads the
// cache row the first one appended (the cache update path). With --force-decisions the steps follow the
// forcing fixture, so the default is then none (give --decode-steps to match its decode cases).
constexpr int64_t kDefaultDecodeSteps = 2;

// One line on stderr: how many rows of the fixture can show a sparse-attention bug (row verdicts name
// failing rows; rows with at most top_k keys attend every key whatever the indexer chose).
void say_rows_past_top_k(int64_t prompt, int64_t decode_steps, int64_t top_k) {
  if (top_k <= 0) return;
  const int64_t past = std::max<int64_t>(0, prompt - top_k), steps_past = std::max<int64_t>(0, std::min(decode_steps, prompt + decode_steps - top_k));
  if (past + steps_past > 0)
    std::fprintf(stderr, "capture: %lld of %lld prompt rows and %lld of %lld decode steps have more keys than top_k (%lld): "
                         "a sparse-attention bug shows there\n",
                 (long long)past, (long long)prompt, (long long)steps_past, (long long)decode_steps, (long long)top_k);
  else
    std::fprintf(stderr, "capture: note: no row has more keys than top_k (%lld): dense attention would pass this fixture; "
                         "capture at least %lld tokens to judge the indexer's selection\n",
                 (long long)top_k, (long long)(top_k + 32));
}


long long parse_int(const std::string& s, const char* what) {
  try {
    size_t n = 0;
    long long v = std::stoll(s, &n);
    if (n != s.size()) throw std::invalid_argument(s);
    return v;
  } catch (const std::exception&) {
    throw InputError(std::string(what) + ": '" + s + "' is not an integer");
  }
}

// A layer index of a list option, checked before it is narrowed to int: 4294967296 once became layer 0.
int parse_layer(const std::string& s, const char* what) {
  const long long v = parse_int(s, what);
  if (v < 0 || v > INT32_MAX) throw InputError(std::string(what) + ": '" + s + "' is not a layer index");
  return static_cast<int>(v);
}

CommandRegistration reg(40, [](CLI::App& root) {
  auto a = std::make_shared<CaptureArgs>();
  CLI::App* c = root.add_subcommand("capture", "Capture a golden HDF5 fixture from a GGUF model with the CPU reference");
  c->add_option("--model", a->o.model, "GGUF model (any shard of a split model)")->required();
  c->add_option("--out", a->o.out, "fixture to write (.h5), written atomically")->required();
  c->add_option("--layers", a->layers, "layers to capture: comma list (0,3,40) or all")->capture_default_str();
  auto* pi = c->add_option("--prompt-ids", a->prompt_ids, "prompt token ids, comma separated");
  auto* rt = c->add_option("--random-tokens", a->o.random_tokens, "a random prompt of N tokens");
  pi->excludes(rt);
  c->add_option("--seed", a->o.seed, "seed for --random-tokens (and decode tokens without a head)")
      ->check(CLI::Range(int64_t{0}, INT64_MAX))  // the case name carries it as a signed 64-bit number
      ->capture_default_str();
  c->add_option("--decode-steps", a->decode_steps,
                 "decode steps after the prompt, one case each (default: 2 where they fit in the context, 0 with --force-decisions)")
      ->check(CLI::Range(0, 1 << 20));
  c->add_option("--generate", a->o.generate, "greedy generation of N tokens (oracle greedy layout)")->check(CLI::Range(0, 1 << 20));
  c->add_option("--precision", a->o.precision, "reference precision")->check(CLI::IsMember({"f64", "f32"}))->capture_default_str();
  c->add_option("--case-name", a->o.case_name, "name of the forward case group (default: canonical from the parameters)")
      ->check(non_empty());
  c->add_option("--backend", a->backend, "reference or cuda")->check(CLI::IsMember({"reference", "cuda"}))->capture_default_str();
  c->add_option("--hidden-source", a->o.hidden_source,
                "input of the first captured layer: forward (real pass through the layers before it) or synthetic (token "
                "embeddings fed directly to it)")
      ->check(CLI::IsMember({"forward", "synthetic"}))
      ->capture_default_str();
  c->add_option("--expert-cache-mb", a->o.expert_cache_mb,
                "memory budget for dequantized routed experts (with --generate; other captures drop a layer's weights "
                "once it has run and keep only the expert in use)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  c->add_option("--threads", a->o.threads, "reference threads (default 0: every core); the values do not depend on it")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  c->add_option("--experts-in-flight", a->o.experts_in_flight,
                 "reference: routed experts run side by side, one per thread, at most this many (default 1: one after "
                 "another, each split over the threads; 0: as many as 4 GiB of dequantized experts holds); the values do "
                 "not depend on it")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  c->add_option("--op-layers", a->op_layers,
                 "op-level datasets for these captured layers, or all (default: every captured layer while their op-level "
                 "datasets stay within 1 GB as double, else none)");
  c->add_flag("--no-op-level", a->no_op_level, "model-level datasets only");
  c->add_flag("--dense-attention", a->o.dense_attention, "negative control: ignore the indexer (dense causal attention)");
  c->add_option("--fault", a->o.fault, "cuda negative control: a fault of optimized/faults.h (dense-attention, topk-upper-tie, ...)");
  c->add_option("--force-decisions", a->o.force_decisions,
                "use this fixture's decisions (indexer top-k, router ids) in every pass; the backend's own are still stored")
      ->check(non_empty());
  auto* qf = c->add_flag("--quiet", a->quiet, "no progress bar");
  c->add_flag("--progress", a->progress, "progress bar even when stderr is not a terminal (plain lines, no \\r)")->excludes(qf);
  c->add_option("--devices", a->devices, "cuda: layer split over these CUDA devices, e.g. 0,1 (0,0: virtual devices)");
  add_kernel_config_option(c, &a->kernel_config);
  c->callback([a, c] {
    be::CaptureOptions o = a->o;
    if (!a->kernel_config.empty() && a->backend != "cuda") throw InputError("--kernel-config needs --backend cuda");
    o.kernels = kernel_config(a->kernel_config);
    if (a->layers == "all") {
      o.all_layers = true;
    } else {
      o.all_layers = false;
      for (const auto& s : split_list(a->layers)) o.layers.push_back(parse_layer(s, "--layers"));
    }
    for (const auto& s : split_list(a->prompt_ids)) {
      long long v = parse_int(s, "--prompt-ids");
      if (v < 0 || v > INT32_MAX) throw InputError("--prompt-ids: " + s + " is not a token id");
      o.prompt_ids.push_back(static_cast<int32_t>(v));
    }
    if (o.prompt_ids.empty() && o.random_tokens <= 0) throw InputError("give --prompt-ids or --random-tokens N (N > 0)");
    if (o.prompt_ids.empty()) require_count(o.random_tokens, "--random-tokens", 1);  // before prompt + steps
    // Before any work: the files, and the sizes against the model's context (headers only: fast).
    require_regular_file(o.model, "--model");
    // Every input a regular file (stat only: a FIFO never blocks), and never the output.
    if (!o.force_decisions.empty()) require_regular_file(o.force_decisions, "--force-decisions");
    if (!o.case_name.empty()) require_case_name(o.case_name, "--case-name");
    const GgufFile model = GgufFile::open(o.model);
    std::vector<std::string> inputs;
    for (const GgufShard& sh : model.shards()) inputs.push_back(sh.path);
    if (!o.force_decisions.empty()) inputs.push_back(o.force_decisions);
    require_output_path(o.out, "--out", inputs);
    const ModelConfig cfg = ModelConfig::from_gguf(model);
    const int64_t prompt = o.prompt_ids.empty() ? o.random_tokens : static_cast<int64_t>(o.prompt_ids.size());
    o.decode_steps = a->decode_steps >= 0             ? a->decode_steps
                     : !o.force_decisions.empty()     ? 0
                                                      : std::clamp<int64_t>(cfg.n_ctx_train - prompt, 0, kDefaultDecodeSteps);
    const int64_t need = prompt + std::max(o.decode_steps, o.generate);
    if (prompt > cfg.n_ctx_train || need > cfg.n_ctx_train)
      throw InputError(o.model + ": " + std::to_string(prompt) + " prompt tokens + " + std::to_string(std::max(o.decode_steps, o.generate)) +
                       " steps exceed the model's context length " + std::to_string(cfg.n_ctx_train));
    o.op_level = !a->no_op_level;
    if (a->op_layers == "all")
      o.op_layers_all = true;
    else
      for (const auto& s : split_list(a->op_layers)) o.op_layers.push_back(parse_layer(s, "--op-layers"));
    o.quiet = a->quiet;
    o.progress = a->quiet ? ProgressMode::Never : a->progress ? ProgressMode::Always : ProgressMode::Auto;
    std::ostringstream cl;
    cl << "mlaconf capture --model " << o.model << " --layers " << a->layers;
    if (!a->prompt_ids.empty()) cl << " --prompt-ids " << a->prompt_ids;
    if (o.random_tokens) cl << " --random-tokens " << o.random_tokens << " --seed " << o.seed;
    if (!a->op_layers.empty()) cl << " --op-layers " << a->op_layers;
    if (a->no_op_level) cl << " --no-op-level";
    if (o.decode_steps) cl << " --decode-steps " << o.decode_steps;
    if (o.generate) cl << " --generate " << o.generate;
    if (a->backend != "reference") cl << " --backend " << a->backend;
    if (!o.force_decisions.empty()) cl << " --force-decisions " << o.force_decisions;
    if (!o.fault.empty()) cl << " --fault " << o.fault;
    if (!a->devices.empty()) cl << " --devices " << a->devices;
    if (a->backend == "cuda") cl << " --kernel-config " << cuda::to_string(o.kernels);  // the environment's overrides too
    cl << " --precision " << o.precision << " --hidden-source " << o.hidden_source << " --out " << o.out;
    o.command_line = cl.str();
    o.backend = a->backend;
    o.devices = parse_devices(a->devices);
    if (!o.devices.empty() && o.backend != "cuda") throw InputError("--devices needs --backend cuda");
    if (!a->quiet) say_rows_past_top_k(prompt, o.decode_steps, cfg.indexer_top_k);
    be::capture(o);  // NotSupported: main() prints it and exits 3
    set_exit_code(kExitOk);
  });
});

}  // namespace
}  // namespace mlaconf::cli
