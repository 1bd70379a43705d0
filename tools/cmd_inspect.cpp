// `mlaconf inspect MODEL.gguf [--json] [--tensor NAME [--stats]]`: what a GGUF holds.
//
// Without --tensor: the header, the metadata (long arrays summarised), the ModelConfig, the tensor table
// (name, type, shape, bytes, offset) and the validate_weights verdict; --json prints all of it as one
// JSON document. Only headers are read (a 400 GB split model returns at once). A file that parses but
// is not a usable glm-dsa model (missing key, shape disagreeing with the config) is still printed, then
// the verdict goes to stderr as one error line and the exit code is 2.
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
#include "core/model_config.h"
#include "core/weight_layout.h"
#include "reference/dequant/dequant.h"
#include "tools/command.h"

namespace mlaconf::cli {
namespace {

struct InspectArgs {
  std::string model;
  bool json = false;
  std::string tensor;
  bool stats = false;
  size_t max_items = 8;
};

// JSON string literal: escapes quotes, backslashes and control bytes; bytes that are not valid UTF-8
// become U+FFFD so the document stays valid whatever the file holds.
std::string jstr(const std::string& s) {
  std::string o = "\"";
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = p[i];
    if (c < 0x80) {
      switch (c) {
        case '"': o += "\\\""; break;
        case '\\': o += "\\\\"; break;
        case '\n': o += "\\n"; break;
        case '\t': o += "\\t"; break;
        case '\r': o += "\\r"; break;
        default:
          if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
          } else {
            o += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xC0) == 0x80;
    if (ok && len == 2) ok = c >= 0xC2;
    if (ok && len == 3) ok = !(c == 0xE0 && p[i + 1] < 0xA0) && !(c == 0xED && p[i + 1] >= 0xA0);
    if (ok && len == 4) ok = c <= 0xF4 && !(c == 0xF0 && p[i + 1] < 0x90) && !(c == 0xF4 && p[i + 1] >= 0x90);
    if (ok) {
      o.append(reinterpret_cast<const char*>(p + i), len);
      i += len;
    } else {
      o += "\\ufffd";
      ++i;
    }
  }
  return o + "\"";
}

std::string jnum(double v) {
  if (!std::isfinite(v)) return "null";
  char b[40];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

std::string jshape(const TensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

std::string jvalue(const GgufValue& v, size_t max_items) {
  if (v.type == GgufType::STRING) return jstr(v.s);
  if (v.type == GgufType::BOOL) return v.i ? "true" : "false";
  if (gguf_type_is_integer(v.type)) return std::to_string(v.i);
  if (gguf_type_is_float(v.type)) return jnum(v.f);
  const size_t n = v.array_size();
  const size_t shown = std::min(n, max_items);
  std::string s = "{\"elem_type\": " + jstr(gguf_type_name(v.elem_type)) + ", \"count\": " + std::to_string(n) +
                  (shown < n ? ", \"head\": [" : ", \"values\": [");
  for (size_t k = 0; k < shown; ++k) {
    if (k) s += ", ";
    if (!v.strings.empty()) s += jstr(v.strings[k]);
    else if (!v.floats.empty()) s += jnum(v.floats[k]);
    else if (v.elem_type == GgufType::BOOL) s += v.ints[k] ? "true" : "false";
    else s += std::to_string(v.ints[k]);
  }
  return s + "]}";
}

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
    std::printf("{\"name\": %s, \"type\": %s, \"shape\": %s, \"min\": %s, \"max\": %s, \"mean\": %s, \"rms\": %s}\n",
                jstr(t.name).c_str(), jstr(type_name(t.type)).c_str(), jshape(t).c_str(), jnum(mn).c_str(),
                jnum(mx).c_str(), jnum(mean).c_str(), jnum(rms).c_str());
  } else {
    std::printf("%s  %s  %s  %lld values\n  min %.9g  max %.9g  mean %.9g  rms %.9g\n", t.name.c_str(),
                type_name(t.type), t.shape_string().c_str(), static_cast<long long>(n), mn, mx, mean, rms);
  }
  return kExitOk;
}

int print_json(const GgufFile& f, const InspectArgs& a, const ModelConfig* cfg, const std::string& verdict) {
  std::string o = "{\n  \"file\": " + jstr(f.path()) + ",\n  \"version\": " + std::to_string(f.version()) +
                  ",\n  \"total_file_size\": " + std::to_string(f.total_file_size()) + ",\n  \"shards\": [";
  for (size_t k = 0; k < f.shards().size(); ++k) {
    const GgufShard& s = f.shards()[k];
    o += std::string(k ? "," : "") + "\n    {\"path\": " + jstr(s.path) + ", \"file_size\": " + std::to_string(s.file_size) +
         ", \"version\": " + std::to_string(s.version) + ", \"alignment\": " + std::to_string(s.alignment) +
         ", \"data_offset\": " + std::to_string(s.data_offset) + ", \"n_tensors\": " + std::to_string(s.n_tensors) +
         ", \"n_kv\": " + std::to_string(s.n_kv) + "}";
  }
  o += "\n  ],\n  \"metadata\": {";
  bool first = true;
  for (const auto& [k, v] : f.metadata()) {
    o += std::string(first ? "" : ",") + "\n    " + jstr(k) + ": {\"type\": " + jstr(gguf_type_name(v.type)) +
         ", \"value\": " + jvalue(v, a.max_items) + "}";
    first = false;
  }
  o += "\n  },\n  \"config\": " + (cfg ? cfg->to_json(0) : std::string("null")) + ",\n  \"tensors\": [";
  for (size_t k = 0; k < f.tensors().size(); ++k) {
    const TensorInfo& t = f.tensors()[k];
    o += std::string(k ? "," : "") + "\n    {\"name\": " + jstr(t.name) + ", \"type\": " + jstr(type_name(t.type)) +
         ", \"shape\": " + jshape(t) + ", \"bytes\": " + std::to_string(t.nbytes) +
         ", \"offset\": " + std::to_string(t.offset) + ", \"shard\": " + std::to_string(t.shard) + "}";
  }
  o += "\n  ],\n  \"validation\": {\"ok\": " + std::string(verdict.empty() ? "true" : "false") +
       (verdict.empty() ? "" : ", \"error\": " + jstr(verdict)) + "}\n}\n";
  std::fwrite(o.data(), 1, o.size(), stdout);
  return verdict.empty() ? kExitOk : kExitBadInput;
}

int print_text(const GgufFile& f, const InspectArgs& a, const ModelConfig* cfg, const std::string& verdict) {
  std::printf("file      %s\n", f.path().c_str());
  std::printf("GGUF      v%u, %zu shard(s), %llu bytes, %zu tensors, %zu metadata keys\n", f.version(),
              f.shards().size(), static_cast<unsigned long long>(f.total_file_size()), f.tensors().size(),
              f.metadata().size());
  for (const GgufShard& s : f.shards())
    std::printf("  shard   %s: %llu bytes, v%u, alignment %llu, data at %llu, %llu tensors, %llu keys\n", s.path.c_str(),
                static_cast<unsigned long long>(s.file_size), s.version, static_cast<unsigned long long>(s.alignment),
                static_cast<unsigned long long>(s.data_offset), static_cast<unsigned long long>(s.n_tensors),
                static_cast<unsigned long long>(s.n_kv));
  std::printf("\nmetadata\n");
  size_t w = 0;
  for (const auto& kv : f.metadata()) w = std::max(w, kv.first.size());
  for (const auto& [k, v] : f.metadata())
    std::printf("  %-*s  %-6s  %s\n", static_cast<int>(w), k.c_str(), gguf_type_name(v.type),
                v.to_string(a.max_items).c_str());
  std::printf("\nconfig\n%s", cfg ? cfg->summary().c_str() : "  (none: see the verdict)\n");
  std::printf("\ntensors\n");
  size_t nw = 4;
  for (const auto& t : f.tensors()) nw = std::max(nw, t.name.size());
  std::printf("  %-*s  %-7s  %-20s  %12s  %12s  %s\n", static_cast<int>(nw), "name", "type", "shape", "bytes", "offset",
              "shard");
  for (const auto& t : f.tensors())
    std::printf("  %-*s  %-7s  %-20s  %12llu  %12llu  %d\n", static_cast<int>(nw), t.name.c_str(), type_name(t.type),
                t.shape_string().c_str(), static_cast<unsigned long long>(t.nbytes),
                static_cast<unsigned long long>(t.offset), t.shard);
  std::printf("\nverdict   %s\n", verdict.empty() ? "OK: every tensor the config implies is present with its shape"
                                                  : "INVALID (see the error)");
  std::fflush(stdout);
  return verdict.empty() ? kExitOk : kExitBadInput;
}

int run(const InspectArgs& a) {
  GgufFile f = GgufFile::open(a.model);
  if (!a.tensor.empty()) {
    if (a.stats) return print_stats(f, a);
    const TensorInfo& t = f.tensor(a.tensor);
    if (a.json)
      std::printf("{\"name\": %s, \"type\": %s, \"shape\": %s, \"bytes\": %llu, \"offset\": %llu, \"shard\": %d}\n",
                  jstr(t.name).c_str(), jstr(type_name(t.type)).c_str(), jshape(t).c_str(),
                  static_cast<unsigned long long>(t.nbytes), static_cast<unsigned long long>(t.offset), t.shard);
    else
      std::printf("%s  %s  %s  %llu bytes at offset %llu (shard %d)\n", t.name.c_str(), type_name(t.type),
                  t.shape_string().c_str(), static_cast<unsigned long long>(t.nbytes),
                  static_cast<unsigned long long>(t.offset), t.shard);
    return kExitOk;
  }
  std::unique_ptr<ModelConfig> cfg;
  const std::string verdict = check_model(f, &cfg);
  const int rc = a.json ? print_json(f, a, cfg.get(), verdict) : print_text(f, a, cfg.get(), verdict);
  if (!verdict.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr, "mlaconf: error: %s\n", verdict.c_str());
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
