// `mlaconf generate`: greedy generation, printing each token as it comes and the top-1/top-2 margin.
//
//   mlaconf generate --model M.gguf --prompt-ids 1,2,3 -n 24 [--precision f32|f64] [--json]
//
// The generation loop talks to a Backend (prefill/decode -> logits of the last position), so another
// backend (cuda) or a text front end (--prompt through a tokenizer) plugs in without touching the loop:
// add a make_backend() case, or fill `prompt_ids` from the text before the loop.
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "reference/model.h"
#include "tools/command.h"

namespace mlaconf::cli {
namespace {

// Something that turns token ids into next-token logits, keeping its own caches.
class Backend {
 public:
  virtual ~Backend() = default;
  // Appends `ids` at the next positions; returns the logits of the last one (double, [vocab]).
  virtual std::vector<double> next_logits(const std::vector<int32_t>& ids) = 0;
  virtual std::string describe() const = 0;
};

template <class S>
class ReferenceBackend : public Backend {
 public:
  ReferenceBackend(const GgufFile& f, const ModelConfig& c, size_t expert_bytes) : m_(f, c, options(expert_bytes)) {}
  std::vector<double> next_logits(const std::vector<int32_t>& ids) override {
    ref::Mat<S> lg = m_.forward_last(ids);
    std::vector<double> out(static_cast<size_t>(lg.cols()));
    for (Eigen::Index v = 0; v < lg.cols(); ++v) out[v] = static_cast<double>(lg(lg.rows() - 1, v));
    return out;
  }
  std::string describe() const override { return std::string("reference ") + (sizeof(S) == 8 ? "f64" : "f32"); }

 private:
  static ref::ModelOptions options(size_t expert_bytes) {
    ref::ModelOptions o;
    o.expert_cache_bytes = expert_bytes;
    return o;
  }
  ref::Model<S> m_;
};

struct GenerateArgs {
  std::string model;
  std::string prompt_ids;
  std::string prompt;  // text; needs a tokenizer (not wired here yet)
  int64_t n = 16;
  std::string precision = "f32";
  std::string backend = "reference";
  double expert_cache_gib = 4.0;
  bool json = false;
};

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a == std::string::npos) throw InputError("generate: --prompt-ids has an empty entry in '" + s + "'");
    item = item.substr(a, b - a + 1);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX)
      throw InputError("generate: --prompt-ids: '" + item + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw InputError("generate: --prompt-ids is empty");
  return ids;
}

std::unique_ptr<Backend> make_backend(const GenerateArgs& a, const GgufFile& f, const ModelConfig& c) {
  const size_t bytes = static_cast<size_t>(a.expert_cache_gib * double(1ull << 30));
  if (a.backend == "reference") {
    if (a.precision == "f64") return std::make_unique<ReferenceBackend<double>>(f, c, bytes);
    return std::make_unique<ReferenceBackend<float>>(f, c, bytes);
  }
  return nullptr;  // e.g. cuda: not wired into generate yet
}

// Greedy argmax, ties to the lower id; margin = top-1 minus top-2.
int32_t argmax(const std::vector<double>& lg, double* margin) {
  int32_t best = 0, second = -1;
  for (int32_t i = 1; i < static_cast<int32_t>(lg.size()); ++i) {
    if (lg[i] > lg[best]) {
      second = best;
      best = i;
    } else if (second < 0 || lg[i] > lg[second]) {
      second = i;
    }
  }
  *margin = second < 0 ? 0.0 : lg[best] - lg[second];
  return best;
}

void run(const GenerateArgs& a) {
  if (!a.prompt.empty()) {
    std::fprintf(stderr, "mlaconf generate: --prompt (text) needs a tokenizer, which generate does not use yet; "
                         "pass --prompt-ids\n");
    set_exit_code(kExitNotSupported);
    return;
  }
  if (a.prompt_ids.empty()) throw InputError("generate: give --prompt-ids (comma-separated token ids)");
  if (a.n < 0) throw InputError("generate: -n must be >= 0");
  std::vector<int32_t> ids = parse_ids(a.prompt_ids);
  GgufFile f = GgufFile::open(a.model);
  ModelConfig c = ModelConfig::from_gguf(f);
  for (int32_t id : ids)
    if (id >= c.n_vocab)
      throw InputError(a.model + ": prompt token " + std::to_string(id) + " is outside the vocabulary (" +
                       std::to_string(c.n_vocab) + ")");
  std::unique_ptr<Backend> be = make_backend(a, f, c);
  if (!be) {
    std::fprintf(stderr, "mlaconf generate: backend '%s' is not supported by generate\n", a.backend.c_str());
    set_exit_code(kExitNotSupported);
    return;
  }
  if (!a.json) std::printf("generate: %s, %zu prompt tokens, %lld new\n", be->describe().c_str(), ids.size(),
                           static_cast<long long>(a.n));
  std::vector<int32_t> tokens;
  std::vector<double> margins;
  std::vector<int32_t> feed = ids;  // prefill first, then one token per step (incremental decode)
  for (int64_t step = 0; step < a.n; ++step) {
    std::vector<double> lg = be->next_logits(feed);
    double margin = 0;
    int32_t tok = argmax(lg, &margin);
    tokens.push_back(tok);
    margins.push_back(margin);
    if (!a.json) {
      std::printf("step %lld: token %d  margin %.6g\n", static_cast<long long>(step), tok, margin);
      std::fflush(stdout);
    }
    feed.assign(1, tok);
  }
  if (a.json) {
    std::string s = "{\"tokens\": [";
    for (size_t i = 0; i < tokens.size(); ++i) s += (i ? ", " : "") + std::to_string(tokens[i]);
    s += "], \"margins\": [";
    char buf[64];
    for (size_t i = 0; i < margins.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%s%.17g", i ? ", " : "", margins[i]);
      s += buf;
    }
    s += "]}";
    std::printf("%s\n", s.c_str());
  }
  set_exit_code(kExitOk);
}

const CommandRegistration reg(30, [](CLI::App& root) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* s = root.add_subcommand("generate", "Greedy generation with the reference (token ids in, token ids out)");
  s->add_option("--model,-m", a->model, "GGUF model (any shard of a split model)")->required();
  s->add_option("--prompt-ids", a->prompt_ids, "prompt token ids, comma-separated");
  s->add_option("--prompt", a->prompt, "prompt text (needs a tokenizer: not supported yet)");
  s->add_option("-n,--n-new", a->n, "tokens to generate (default 16)");
  s->add_option("--precision", a->precision, "f32 (default) or f64")->check(CLI::IsMember({"f32", "f64"}));
  s->add_option("--backend", a->backend, "reference (default); others are not wired into generate yet");
  s->add_option("--expert-cache-gib", a->expert_cache_gib, "LRU budget for dequantized experts (default 4)");
  s->add_flag("--json", a->json, "print one JSON object {\"tokens\": [...], \"margins\": [...]} (generated only)");
  s->callback([a] { run(*a); });
});

}  // namespace
}  // namespace mlaconf::cli
