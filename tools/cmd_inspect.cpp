// `mlaconf inspect MODEL.gguf [--json] [--tensor NAME [--stats]]`: what a GGUF holds.
//
// Without --tensor: the header, the metadata (long arrays summarised), the ModelConfig, the tensor table
// (name, type, shape, bytes, offset) and the validate_weights verdict; --json prints all of it as one
// JSON document. Only headers are read (a 400 GB split model returns at once). A file that parses but
// is not a usable glm-dsa model (missing key, shape disagreeing with the config) is still printed, then
// the verdict goes to stderr as one error line and the exit code is 2. Names and strings from the file
// are printed escaped (core/text_escape.h): a GGUF cannot put a control sequence on the terminal.
//
// With --tensor NAME --stats: dequantizes that tensor in bounded chunks of rows and prints min, max,
// mean and rms (mean and rms accumulated in double); with --json exactly one object with the keys
// name, type, shape, min, max, mean, rms.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/json.h"
#include "core/model_config.h"
#include "core/text_escape.h"
#include "core/weight_layout.h"
#include "reference/dequant/dequant.h"
#include "tools/command.h"
#include "tools/validate.h"

namespace mlaconf::cli {
namespace {

struct InspectArgs {
  std::string model;
  bool json = false;
  std::string tensor;
  bool stats = false;
  size_t max_items = 8;
};

Json jshape(const TensorInfo& t) {
  Json s = Json::array();
  for (int d = 0; d < t.n_dims; ++d) s.push_back(t.ne[d]);
  return s;
}

Json jvalue(const GgufValue& v, size_t max_items) {
  if (v.type == GgufType::STRING) return v.s;
  if (v.type == GgufType::BOOL) return v.i != 0;
  if (gguf_type_is_integer(v.type)) return v.i;
  if (gguf_type_is_float(v.type)) return v.f;
  const size_t n = v.array_size();
  const size_t shown = std::min(n, max_items);
  Json items = Json::array();
  for (size_t k = 0; k < shown; ++k) {
    if (!v.strings.empty()) items.push_back(v.strings[k]);
    else if (!v.floats.empty()) items.push_back(v.floats[k]);
    else if (v.elem_type == GgufType::BOOL) items.push_back(v.ints[k] != 0);
    else items.push_back(v.ints[k]);
  }
  Json o = {{"elem_type", gguf_type_name(v.elem_type)}, {"count", n}};
  o[shown < n ? "head" : "values"] = std::move(items);
  return o;
}

void print_line(const Json& j) { std::printf("%s\n", json_text(j, -1).c_str()); }

// The config and the weight verdict: the error message, or "" when the model is usable.
std::string check_model(const GgufFile& f, std::unique_ptr<ModelConfig>* cfg) {
  try {
    *cfg = std::make_unique<ModelConfig>(ModelConfig::from_gguf(f));
  } catch (const InputError& e) {
    return e.what();
  }
  try {
    validate_weights(f, **cfg);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

int print_stats(const GgufFile& f, const InspectArgs& a) {
  const TensorInfo& t = f.tensor(a.tensor);
  if (!ref::can_dequantize(t.type))
    throw InputError(f.path() + ": tensor '" + t.name + "' has type " + type_name(t.type) +
                     ", which mlaconf cannot dequantize");
  const int64_t ne0 = t.ne[0], rows = t.n_rows();
  const int64_t chunk_rows = std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(ne0, 1));
  std::vector<float> buf;
  double sum = 0, sumsq = 0, mn = INFINITY, mx = -INFINITY;
  int64_t n = 0;
  for (int64_t r0 = 0; r0 < rows && ne0 > 0; r0 += chunk_rows) {
    const int64_t nr = std::min(chunk_rows, rows - r0);
    buf.resize(static_cast<size_t>(nr * ne0));
    ref::dequantize_rows(t, r0, nr, buf.data());
    for (float x : buf) {
      const double d = x;
      sum += d;
      sumsq += d * d;
      mn = std::min(mn, d);
      mx = std::max(mx, d);
      if (std::isnan(d)) mn = mx = d;
    }
    n += nr * ne0;
  }
  const double mean = n ? sum / n : 0, rms = n ? std::sqrt(sumsq / n) : 0;
  if (a.json) {
    print_line({{"name", t.name}, {"type", type_name(t.type)}, {"shape", jshape(t)}, {"min", mn}, {"max", mx},
                {"mean", mean}, {"rms", rms}});
  } else {
    std::printf("%s  %s  %s  %lld values\n  min %.17g  max %.17g  mean %.17g  rms %.17g\n", escape_text(t.name).c_str(),
                type_name(t.type), t.shape_string().c_str(), static_cast<long long>(n), mn, mx, mean, rms);
  }
  return kExitOk;
}

int print_json(const GgufFile& f, const InspectArgs& a, const ModelConfig* cfg, const std::string& verdict) {
  Json shards = Json::array();
  for (const GgufShard& s : f.shards())
    shards.push_back({{"path", s.path}, {"file_size", s.file_size}, {"version", s.version}, {"alignment", s.alignment},
                      {"data_offset", s.data_offset}, {"n_tensors", s.n_tensors}, {"n_kv", s.n_kv}});
  Json meta = Json::object();
  for (const auto& [k, v] : f.metadata()) meta[k] = {{"type", gguf_type_name(v.type)}, {"value", jvalue(v, a.max_items)}};
  Json tensors = Json::array();
  for (const TensorInfo& t : f.tensors())
    tensors.push_back({{"name", t.name}, {"type", type_name(t.type)}, {"shape", jshape(t)}, {"bytes", t.nbytes},
                       {"offset", t.offset}, {"shard", t.shard}});
  Json validation = {{"ok", verdict.empty()}};
  if (!verdict.empty()) validation["error"] = verdict;
  Json doc = {{"file", f.path()},
              {"version", f.version()},
              {"total_file_size", f.total_file_size()},
              {"shards", std::move(shards)},
              {"metadata", std::move(meta)},
              {"config", cfg ? cfg->to_json_value() : Json(nullptr)},
              {"tensors", std::move(tensors)},
              {"validation", std::move(validation)}};
  const std::string o = json_text(doc) + "\n";
  std::fwrite(o.data(), 1, o.size(), stdout);
  return verdict.empty() ? kExitOk : kExitBadInput;
}

int print_text(const GgufFile& f, const InspectArgs& a, const ModelConfig* cfg, const std::string& verdict) {
  std::printf("file      %s\n", escape_text(f.path()).c_str());
  std::printf("GGUF      v%u, %zu shard(s), %llu bytes, %zu tensors, %zu metadata keys\n", f.version(),
              f.shards().size(), static_cast<unsigned long long>(f.total_file_size()), f.tensors().size(),
              f.metadata().size());
  for (const GgufShard& s : f.shards())
    std::printf("  shard   %s: %llu bytes, v%u, alignment %llu, data at %llu, %llu tensors, %llu keys\n", escape_text(s.path).c_str(),
                static_cast<unsigned long long>(s.file_size), s.version, static_cast<unsigned long long>(s.alignment),
                static_cast<unsigned long long>(s.data_offset), static_cast<unsigned long long>(s.n_tensors),
                static_cast<unsigned long long>(s.n_kv));
  std::printf("\nmetadata\n");
  size_t w = 0;
  for (const auto& kv : f.metadata()) w = std::max(w, escape_text(kv.first).size());
  for (const auto& [k, v] : f.metadata())
    std::printf("  %-*s  %-6s  %s\n", static_cast<int>(w), escape_text(k).c_str(), gguf_type_name(v.type),
                escape_text(v.to_string(a.max_items)).c_str());
  std::printf("\nconfig\n%s", cfg ? cfg->summary().c_str() : "  (none: see the verdict)\n");
  std::printf("\ntensors\n");
  size_t nw = 4;
  for (const auto& t : f.tensors()) nw = std::max(nw, escape_text(t.name).size());
  std::printf("  %-*s  %-7s  %-20s  %12s  %12s  %s\n", static_cast<int>(nw), "name", "type", "shape", "bytes", "offset",
              "shard");
  for (const auto& t : f.tensors())
    std::printf("  %-*s  %-7s  %-20s  %12llu  %12llu  %d\n", static_cast<int>(nw), escape_text(t.name).c_str(), type_name(t.type),
                t.shape_string().c_str(), static_cast<unsigned long long>(t.nbytes),
                static_cast<unsigned long long>(t.offset), t.shard);
  std::printf("\nverdict   %s\n", verdict.empty() ? "OK: every tensor the config implies is present with its shape"
                                                  : "INVALID (see the error)");
  std::fflush(stdout);
  return verdict.empty() ? kExitOk : kExitBadInput;
}

int run(const InspectArgs& a) {
  if (a.stats && a.tensor.empty()) throw InputError("inspect: --stats needs --tensor NAME");
  require_regular_file(a.model, "MODEL");
  GgufFile f = GgufFile::open(a.model);
  if (!a.tensor.empty()) {
    if (a.stats) return print_stats(f, a);
    const TensorInfo& t = f.tensor(a.tensor);
    if (a.json)
      print_line({{"name", t.name}, {"type", type_name(t.type)}, {"shape", jshape(t)}, {"bytes", t.nbytes},
                  {"offset", t.offset}, {"shard", t.shard}});
    else
      std::printf("%s  %s  %s  %llu bytes at offset %llu (shard %d)\n", escape_text(t.name).c_str(), type_name(t.type),
                  t.shape_string().c_str(), static_cast<unsigned long long>(t.nbytes),
                  static_cast<unsigned long long>(t.offset), t.shard);
    return kExitOk;
  }
  std::unique_ptr<ModelConfig> cfg;
  const std::string verdict = check_model(f, &cfg);
  const int rc = a.json ? print_json(f, a, cfg.get(), verdict) : print_text(f, a, cfg.get(), verdict);
  if (!verdict.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr, "mlaconf: error: %s\n", escape_text(verdict).c_str());  // one line, as main()'s
  }
  return rc;
}

const CommandRegistration reg(10, [](CLI::App& root) {
  auto a = std::make_shared<InspectArgs>();
  CLI::App* s = root.add_subcommand("inspect", "Print a GGUF's header, metadata, config and tensors; tensor statistics");
  s->add_option("model", a->model, "the GGUF (any shard of a split model)")->required();
  s->add_flag("--json", a->json, "one JSON document (with --tensor --stats: one object name/type/shape/min/max/mean/rms)");
  s->add_option("--tensor", a->tensor, "one tensor by name");
  s->add_flag("--stats", a->stats, "with --tensor: dequantize it and print min, max, mean, rms");
  s->add_option("--max-items", a->max_items, "array items shown before summarising (default 8)");
  s->callback([a] { set_exit_code(run(*a)); });
});

}  // namespace
}  // namespace mlaconf::cli
