// `mlaconf synth`: writes a valid glm-dsa GGUF from a seed (see synth/synth.h).
//
//   mlaconf synth --seed 7 --out tiny.gguf
//   mlaconf synth --preset glm5 --split 8 --header-only --out /tmp/glm5.gguf   (sparse, real-size headers)
//   mlaconf synth --layers 2 --experts 8 --type-default Q8_0 --type attn_k_b=F16 --out small.gguf
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "synth/synth.h"
#include "tools/command.h"
#include "tools/validate.h"

namespace mlaconf::cli {
namespace {

struct SynthArgs {
  uint64_t seed = 0;
  std::string out;
  std::string preset = "tiny";
  std::string arch;
  std::string type_default;
  std::vector<std::string> types;
  int split = 1;
  bool header_only = false;
  uint64_t alignment = 32;
  std::string name;
  DimOverrides dims;  // unset = the preset's
};

GgmlType parse_type(const std::string& s, const std::string& what) {
  auto t = type_from_name(s);
  if (!t) throw InputError("synth: unknown ggml type '" + s + "' in " + what);
  return *t;
}

void run(const SynthArgs& a) {
  synth::Options o;
  o.config = synth::preset(a.preset);
  ModelConfig& c = o.config;
  if (!a.arch.empty()) {
    if (a.arch == "glm-dsa") c.arch = Arch::GlmDsa;
    else if (a.arch == "deepseek32") c.arch = Arch::DeepSeek32;
    else throw InputError("synth: --arch must be glm-dsa or deepseek32, not '" + a.arch + "'");
    c.arch_name = arch_string(c.arch);
  }
  c = with_dims(c, a.dims);  // --layers counts the layers the forward pass runs; block_count = layers + nextn
  if (c.arch == Arch::DeepSeek32 && a.preset == "tiny" && c.rope_scaling_factor == 0) {
    // DeepSeek-V3.2 uses YaRN; give the synthesized file the keys so readers exercise them.
    c.rope_scaling_factor = 40;
    c.rope_scaling_orig_ctx = 4096;
    c.rope_yarn_log_multiplier = 0.1;
  }
  o.seed = a.seed;
  if (!a.type_default.empty()) {
    o.has_type_default = true;
    o.type_default = parse_type(a.type_default, "--type-default");
  }
  for (const std::string& t : a.types) {
    auto eq = t.rfind('=');
    if (eq == std::string::npos || eq == 0) throw InputError("synth: --type wants PATTERN=TYPE, got '" + t + "'");
    o.type_overrides.emplace_back(t.substr(0, eq), parse_type(t.substr(eq + 1), "--type " + t));
  }
  o.split = a.split;
  o.header_only = a.header_only;
  o.alignment = a.alignment;
  o.name = a.name.empty() ? "mlaconf-synth-" + a.preset + "-seed" + std::to_string(a.seed) : a.name;
  // Before writing: the plan (config, types: the readers' rules), the output, and the room it needs.
  require_output_path(a.out, "--out", {});
  const std::vector<synth::PlannedTensor> plan = synth::plan(o);  // checks --split first
  // Every shard's name too: a directory or a special file there is refused now, not at its rename.
  if (o.split > 1)
    for (const std::string& p : synth::output_paths(o, a.out)) require_output_path(p, "--out (shard)", {});
  long double total = 0;  // tensor bytes (headers and padding are small beside them)
  for (const auto& t : plan) total += static_cast<long double>(t.nbytes);
  const uint64_t free = free_bytes_for(a.out);
  std::printf("synth: %.0Lf bytes of tensor data in %d file(s)%s; %llu bytes free\n", total, o.split,
              o.header_only ? " (header only: written as a sparse hole)" : "", static_cast<unsigned long long>(free));
  std::fflush(stdout);
  if (!o.header_only && total > static_cast<long double>(free))
    throw InputError("synth: the model needs " + std::to_string(static_cast<unsigned long long>(total / (1ull << 20))) +
                     " MiB, the filesystem of " + a.out + " has " + std::to_string(free >> 20) + " MiB free");
  const auto paths = synth::write_model(o, a.out);
  uint64_t bytes = 0;
  for (const auto& p : paths) {
    GgufFile f = GgufFile::open(p);  // read back: what we wrote must parse
    bytes = f.total_file_size();
    break;
  }
  std::printf("synth: wrote %zu file(s), %s model, %lld layers, seed %llu%s\n", paths.size(), c.arch_name.c_str(),
              static_cast<long long>(c.n_layer_run()), static_cast<unsigned long long>(a.seed),
              a.header_only ? " (header only: data is a sparse hole)" : "");
  for (const auto& p : paths) std::printf("  %s\n", p.c_str());
  std::printf("  total %llu bytes\n", static_cast<unsigned long long>(bytes));
}

const CommandRegistration reg(20, [](CLI::App& root) {
  auto a = std::make_shared<SynthArgs>();
  CLI::App* s = root.add_subcommand("synth", "Write a valid glm-dsa GGUF with seeded random weights");
  s->add_option("--seed", a->seed, "random seed (same seed and options: identical bytes)")
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
  s->add_option("--out,-o", a->out, "output file (F.gguf; with --split: F-0000k-of-0000N.gguf)")->required();
  s->add_option("--preset", a->preset, "tiny (default) or glm5 (GLM-5's real dims)")->check(CLI::IsMember({"tiny", "glm5"}));
  s->add_option("--arch", a->arch, "glm-dsa (default) or deepseek32");
  s->add_option("--layers,--n-layer", a->dims.layers, "layers the forward pass runs (block_count = layers + nextn)");
  s->add_option("--nextn", a->dims.nextn, "MTP (nextn) layers after them (no tensors are written for them)");
  s->add_option("--n-embd", a->dims.n_embd, "hidden size");
  s->add_option("--n-head", a->dims.n_head, "attention heads");
  s->add_option("--q-lora-rank", a->dims.q_lora, "q LoRA rank");
  s->add_option("--kv-lora-rank", a->dims.kv_lora, "kv LoRA rank (latent)");
  s->add_option("--qk-nope", a->dims.qk_nope, "qk nope head dim");
  s->add_option("--qk-rope", a->dims.qk_rope, "qk rope head dim");
  s->add_option("--v-head", a->dims.v_head, "v head dim");
  s->add_option("--indexer-heads", a->dims.idx_heads, "indexer heads");
  s->add_option("--indexer-dim", a->dims.idx_dim, "indexer head dim");
  s->add_option("--top-k", a->dims.top_k, "indexer top-k");
  s->add_option("--experts", a->dims.experts, "routed experts");
  s->add_option("--experts-used", a->dims.experts_used, "experts per token");
  s->add_option("--shared-experts", a->dims.shared, "shared experts");
  s->add_option("--ff-exp", a->dims.ff_exp, "expert intermediate size");
  s->add_option("--ff", a->dims.ff, "dense MLP intermediate size");
  s->add_option("--vocab", a->dims.vocab, "vocabulary size");
  s->add_option("--dense-lead", a->dims.dense_lead, "leading dense-MLP layers");
  s->add_option("--expert-groups", a->dims.groups, "expert groups");
  s->add_option("--groups-used", a->dims.groups_used, "expert groups used");
  s->add_option("--context", a->dims.ctx, "context_length");
  s->add_option("--indexer-types", a->dims.indexer_types, "per-layer indexer kind, e.g. FFFSSS or 1,1,0 (repeats)");
  s->add_option("--type-default", a->type_default, "type of every quantizable tensor (default: the tiny mix)");
  s->add_option("--type", a->types, "PATTERN=TYPE: tensors whose name contains PATTERN (repeatable, last wins)");
  s->add_option("--split", a->split, "write N shards, 1..1000 (split.no / split.count / split.tensors.count), all or none");
  s->add_flag("--header-only", a->header_only, "exact header and offsets; the data region is a sparse hole");
  s->add_option("--alignment", a->alignment, "general.alignment (power of two; default 32)");
  s->add_option("--name", a->name, "general.name");
  s->callback([a] {
    run(*a);
    set_exit_code(kExitOk);
  });
});

}  // namespace
}  // namespace mlaconf::cli
