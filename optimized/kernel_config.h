// mlaconf optimized: the CUDA pipeline's kernel and plan choices, as one value (KernelConfig) passed in
// PipelineOptions and handed to the launch code that reads it; no kernel file keeps a choice of its own.
// The defaults are the production choices. `mlaconf` sets a config from --kernel-config key=value,...
// over the MLACONF_* environment overrides (tools/settings.h reads them once, at start-up); docs/SETTINGS.md
// lists every key (suites/core checks that table against kKernelKnobs).
//
// Header-only and free of CUDA and JSON, so that the CPU-only build (tools/backend's options), the kernel
// benchmark's nvcc-only build and the .cu files can all include it.
#pragma once
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace mlaconf::cuda {

// Which dequant-GEMV kernels gemv / gemv_experts / gemv_per_head run (optimized/gemv.cu).
//   Default: Q4_K and Q6_K on the tensor cores where gemv_mma_by_default says so (by the shape alone, never by
//            the batch), the SIMT kernels elsewhere;
//   Mma:     Q4_K and Q6_K on the tensor cores at every shape (suites/gpu test_gemv_mma pins it);
//   Simt:    the SIMT kernels at every shape (the fp32 orders suites/gpu emulates bit for bit).
enum class GemvKernel { Default, Mma, Simt };

struct KernelConfig {
  GemvKernel gemv = GemvKernel::Default;
  // Prefill GEMM precision. Fp16: weights rounded to fp16 (activations hi+lo): measured on the tiny model,
  // the rounding flips indexer near-ties that cascade (greedy diverged at step 1 against a reference margin
  // of 0.56). Fp16x3 (default): weights and activations as fp16 hi + lo, three tensor-core GEMMs: 24/24
  // greedy tokens equal. Fp32: SGEMM on fp32 weights (no TF32), the same result, slower.
  enum class Prefill { Fp16, Fp16x3, Fp32 };
  Prefill prefill = Prefill::Fp16x3;
  int64_t gemv_max_tokens = 8;  // passes of at most this many tokens use the fused GEMVs (more: dequant + GEMM)
  // decode_step as a CUDA graph per B (captured on its second step, replayed after): the indexer over max_ctx
  // keys, the same logits as without. Used where the pipeline has one stage and overflow_check is off.
  bool decode_graph = false;
  // decode_step plans sparse MLA (heads per CTA, split of the index list) as for one query, so that each row is
  // computed exactly as when its sequence decodes alone; false: planned for the B queries (fewer, larger splits
  // at large B; the bits then depend on B).
  bool batch_invariant = true;
  // A one-token decode step with the indexer on the side stream runs the indexer's query projection on the main
  // stream, beside the side's key and weights; false: on the side stream after them. The same launches, so the
  // same bits.
  bool indexer_q_main = true;
  // The indexer key's layernorm, RoPE and (in a pass over sequences) scatter in one launch (layernorm_rope),
  // the same bits as three.
  bool indexer_key_fused = true;
  // A batched step's experts grouped by expert (gemv_experts_grouped): unset, from 1 pick per 4 experts on
  // average; true / false at every step.
  std::optional<bool> group_experts;
};

// One key of --kernel-config: its environment override, the values it takes and what it chooses
// (docs/SETTINGS.md's table is made of these rows).
struct KernelKnob {
  const char* key;
  const char* env;
  const char* values;
  const char* meaning;
};
inline constexpr KernelKnob kKernelKnobs[] = {
    {"gemv", "MLACONF_GEMV_VARIANT", "default, mma, simt",
     "dequant-GEMV kernels: tensor cores for Q4_K / Q6_K of at least 1024 x 2048 (default), tensor cores at every "
     "Q4_K / Q6_K shape (mma), SIMT at every shape (simt)"},
    {"prefill", "MLACONF_CUDA_PREFILL", "fp16, fp16x3, fp32", "prefill GEMM precision (weights and activations)"},
    {"gemv_max_tokens", "MLACONF_CUDA_GEMV_MAX_TOKENS", "0 .. 65536",
     "passes of at most this many tokens use the fused GEMVs, longer ones dequantize and run a GEMM"},
    {"decode_graph", "MLACONF_CUDA_GRAPH", "0, 1", "batched decode steps as CUDA graphs (one stage, no overflow check)"},
    {"batch_invariant", "MLACONF_CUDA_BATCH_INVARIANT", "0, 1",
     "sparse MLA planned as for one query in batched decode (each row's bits independent of the batch)"},
    {"indexer_q_main", "MLACONF_CUDA_INDEXER_Q_MAIN", "0, 1",
     "a one-token step's indexer query projection on the main stream, beside the side stream's key"},
    {"indexer_key_fused", "MLACONF_CUDA_FUSED_KEY", "0, 1", "the indexer key's layernorm, RoPE and scatter in one launch"},
    {"group_experts", "MLACONF_GROUP_EXPERTS", "auto, 0, 1",
     "a batched step's experts grouped by expert: auto from 1 pick per 4 experts on average"},
};

namespace kernel_config_detail {
inline const char* gemv_name(GemvKernel g) { return g == GemvKernel::Mma ? "mma" : g == GemvKernel::Simt ? "simt" : "default"; }
inline const char* prefill_name(KernelConfig::Prefill p) {
  return p == KernelConfig::Prefill::Fp16 ? "fp16" : p == KernelConfig::Prefill::Fp32 ? "fp32" : "fp16x3";
}
[[noreturn]] inline void bad(std::string_view source, std::string_view key, std::string_view v, const char* values) {
  throw InputError(std::string(source) + ": " + std::string(key) + " must be one of " + values + ", not '" + std::string(v) + "'");
}
inline bool flag(std::string_view source, std::string_view key, std::string_view v) {
  if (v == "0") return false;
  if (v == "1") return true;
  bad(source, key, v, "0, 1");
}
}  // namespace kernel_config_detail

// Sets one key from its text. `source` names where the value came from in the error ("--kernel-config" or the
// environment variable): an unknown key or a bad value is an InputError of one line.
inline void set_kernel_option(KernelConfig& c, std::string_view key, std::string_view v, std::string_view source) {
  namespace d = kernel_config_detail;
  if (key == "gemv") {
    if (v == "default") c.gemv = GemvKernel::Default;
    else if (v == "mma") c.gemv = GemvKernel::Mma;
    else if (v == "simt") c.gemv = GemvKernel::Simt;
    else d::bad(source, key, v, "default, mma, simt");
  } else if (key == "prefill") {
    if (v == "fp16") c.prefill = KernelConfig::Prefill::Fp16;
    else if (v == "fp16x3") c.prefill = KernelConfig::Prefill::Fp16x3;
    else if (v == "fp32") c.prefill = KernelConfig::Prefill::Fp32;
    else d::bad(source, key, v, "fp16, fp16x3, fp32");
  } else if (key == "gemv_max_tokens") {
    int64_t n = -1;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || end != v.data() + v.size() || n < 0 || n > 65536) d::bad(source, key, v, "0 .. 65536");
    c.gemv_max_tokens = n;
  } else if (key == "decode_graph") {
    c.decode_graph = d::flag(source, key, v);
  } else if (key == "batch_invariant") {
    c.batch_invariant = d::flag(source, key, v);
  } else if (key == "indexer_q_main") {
    c.indexer_q_main = d::flag(source, key, v);
  } else if (key == "indexer_key_fused") {
    c.indexer_key_fused = d::flag(source, key, v);
  } else if (key == "group_experts") {
    if (v == "auto") c.group_experts.reset();
    else c.group_experts = d::flag(source, key, v);
  } else {
    std::string keys;
    for (const KernelKnob& k : kKernelKnobs) keys += std::string(keys.empty() ? "" : ", ") + k.key;
    throw InputError(std::string(source) + ": unknown key '" + std::string(key) + "' (keys: " + keys + ")");
  }
}

// "key=value,key=value" applied over `c` in order (empty: no change).
inline void apply_kernel_config(KernelConfig& c, std::string_view text, std::string_view source = "--kernel-config") {
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      throw InputError(std::string(source) + ": expected key=value, not '" + std::string(item) + "'");
    set_kernel_option(c, item.substr(0, eq), item.substr(eq + 1), source);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
}

// Every key with its value, in kKernelKnobs' order (what `bench` prints and writes as JSON).
inline std::vector<std::pair<std::string, std::string>> kernel_config_fields(const KernelConfig& c) {
  namespace d = kernel_config_detail;
  auto b = [](bool v) { return std::string(v ? "1" : "0"); };
  return {{"gemv", d::gemv_name(c.gemv)},
          {"prefill", d::prefill_name(c.prefill)},
          {"gemv_max_tokens", std::to_string(c.gemv_max_tokens)},
          {"decode_graph", b(c.decode_graph)},
          {"batch_invariant", b(c.batch_invariant)},
          {"indexer_q_main", b(c.indexer_q_main)},
          {"indexer_key_fused", b(c.indexer_key_fused)},
          {"group_experts", c.group_experts ? b(*c.group_experts) : "auto"}};
}

// "gemv=default,prefill=fp16x3,...": the form --kernel-config reads back.
inline std::string to_string(const KernelConfig& c) {
  std::string s;
  for (const auto& [k, v] : kernel_config_fields(c)) s += (s.empty() ? "" : ",") + k + "=" + v;
  return s;
}

}  // namespace mlaconf::cuda
