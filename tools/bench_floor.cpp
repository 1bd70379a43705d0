// mlaconf tools: the read floor of `mlaconf bench --batch` (bench_floor.h).
#include "tools/bench_floor.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace mlaconf::cli {

StepBytes step_bytes(std::span<const TensorInfo> tensors, const ModelConfig& c, int64_t B, int64_t L) {
  StepBytes s;
  const double n = (double)c.n_expert, k = (double)c.n_expert_used;
  const double used = n > 0 ? n * (1.0 - std::pow(1.0 - k / n, (double)B)) : 0;
  for (const TensorInfo& t : tensors) {
    const std::string& nm = t.name;
    if (nm.rfind("blk.", 0) == 0 && std::stoll(nm.substr(4)) >= c.n_layer_run()) continue;  // nextn layers do not run
    if (nm == "token_embd.weight") s.weights += (double)B * (double)t.nbytes / (double)t.ne[1];
    else if (nm.find("_exps") != std::string::npos && n > 0) s.weights += used * (double)t.nbytes / n;
    else s.weights += (double)t.nbytes;
  }
  for (int64_t l = 0; l < c.n_layer_run(); ++l) {
    const bool full = c.is_full_indexer_layer(l);
    s.cache += (double)B * (double)std::min<int64_t>(c.indexer_top_k, L) * (double)c.latent_dim() * 2;
    if (full) s.cache += (double)B * (double)L * (double)c.indexer_head_size * 4;
  }
  return s;
}

ReadFloor read_floor(const StepBytes& s, int64_t B, double gbs) {
  ReadFloor f;
  f.ms_per_step = 1e3 * s.total() / (gbs * 1e9);
  f.tokens_per_s = 1e3 * (double)B / f.ms_per_step;
  return f;
}

double percent_of_floor(const ReadFloor& f, double step_ms) { return step_ms > 0 ? 100.0 * f.ms_per_step / step_ms : 0.0; }

}  // namespace mlaconf::cli
