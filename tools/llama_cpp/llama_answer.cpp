// mlaconf <-> llama.cpp: the run and the conversion of nodes into datasets (see llama_answer.h).
#include "tools/llama_cpp/llama_answer.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "core/text_escape.h"
#include "fixtures/schema.h"
#include "fixtures/tolerances.h"
#include "tools/llama_cpp/library.h"
#include "tools/llama_cpp/tensor_map.h"

namespace mlaconf::llamacpp {
namespace {

std::string layer_path(int l, const std::string& name) { return "layers/" + std::to_string(l) + "/" + name; }

// One node's values as the callback saw them.
struct Record {
  std::vector<double> v;
  int64_t ne[4] = {1, 1, 1, 1};
  Take take = Take::Rows;
  std::string from;  // llama.cpp name and op, for messages
};

// The callback's state for one pass.
struct Collector {
  const Library* lib = nullptr;
  std::map<std::string, Record> got;                  // dataset path -> its node (the last computed wins)
  std::set<std::string> unmapped;                     // "NAME-* (OP)"
  std::map<const abi::TensorHead*, int> kqv_out;      // kqv_out-L nodes -> L
  std::map<const abi::TensorHead*, std::string> want; // nodes asked for -> dataset path
  std::map<const abi::TensorHead*, Take> want_take;
  std::map<const abi::TensorHead*, int> latent_src;   // fattn_mla-L: read src[1]->src[0]; kqv-L: read itself
  std::string error;                                  // an exception inside the callback, rethrown after decode
};

bool on_node(const abi::TensorHead* t, bool ask, void* user) {
  auto* c = static_cast<Collector*>(user);
  try {
    if (ask) {
      const std::string name = c->lib->name(t);
      const std::string op = c->lib->op(t);
      auto [base, l] = split_name(name);
      if (base == kKqvOut && l >= 0) c->kqv_out[t] = l;
      // attn_out: the output projection, the MUL_MAT that consumes kqv_out-L (unnamed in the graph).
      if (op == "MUL_MAT" && t->src[1]) {
        auto it = c->kqv_out.find(t->src[1]);
        if (it != c->kqv_out.end()) {
          c->want[t] = layer_path(it->second, "attn_out");
          c->want_take[t] = Take::Rows;
          return true;
        }
      }
      if (l >= 0 && ((base == kFattnMla && op == "MUL_MAT") || (base == "kqv" && op == "MUL_MAT"))) {
        c->latent_src[t] = l;
        return true;
      }
      if (const MapEntry* e = find_entry(base, l, op)) {
        c->want[t] = e->per_layer ? layer_path(l, e->dataset) : std::string(e->dataset);
        c->want_take[t] = e->take;
        return true;
      }
      // Derived names (" (view)", " (permuted)", ...) and unnamed nodes ("", or "node_N" as the scheduler
      // calls them) are not llama.cpp's graph names.
      if (!name.empty() && name.find(" (") == std::string::npos && name.rfind("node_", 0) != 0 && base != kKqvMla)
        c->unmapped.insert(base + (l >= 0 ? "-* (" : " (") + op + ")");
      return false;
    }
    Record r;
    const abi::TensorHead* src = t;
    std::string path;
    if (auto it = c->latent_src.find(t); it != c->latent_src.end()) {
      path = layer_path(it->second, "attn_latent_out");
      if (c->lib->name(t).rfind(kFattnMla, 0) == 0) {
        // flash attention: src[1] is a permuted view of the attention output [L, H, T]
        if (!t->src[1] || !t->src[1]->src[0]) return true;
        src = t->src[1]->src[0];
        r.take = Take::Rows;
      } else {
        r.take = Take::LatentPermuted;  // kqv-L itself: [L, T, H]
      }
    } else {
      auto w = c->want.find(t);
      if (w == c->want.end()) return true;
      path = w->second;
      r.take = c->want_take[t];
    }
    r.v = c->lib->values(src);
    for (int i = 0; i < 4; ++i) r.ne[i] = src->ne[i];
    r.from = c->lib->name(t) + " (" + c->lib->op(t) + ")";
    c->got[path] = std::move(r);
  } catch (const std::exception& e) {
    if (c->error.empty()) c->error = e.what();
    return false;
  }
  return true;
}

// The dims of a dataset after its first axis (rows), from the schema and the model.
std::vector<int64_t> trailing_dims(const std::string& path, const fx::ModelDims& dims) {
  const fx::DatasetSpec* s = fx::spec_for(path);
  std::vector<int64_t> out;
  if (!s) return out;
  std::stringstream ss(s->shape);
  std::string sym;
  bool first = true;
  while (std::getline(ss, sym, ',')) {
    if (first) {
      first = false;
      continue;
    }
    auto it = dims.d.find(sym);
    out.push_back(it == dims.d.end() ? -1 : it->second);
  }
  return out;
}

// One run (a forward case and its decode steps): what the earlier passes left in the caches.
struct RunState {
  std::map<std::string, std::vector<double>> cache_rows;  // dataset path -> rows of every pass so far
};

// Shared indexer layers (GLM-5.2) reuse the top-k of the full layer before them, and llama.cpp names that one
// node again for each of them: the node of full layer F ends up named top_k-S, S the last shared layer after F.
// So a layer's top-k is the top_k node of the smallest layer >= it.
void share_indexer_topk(Collector& col, const ModelConfig& c) {
  const Record* next = nullptr;
  for (int l = static_cast<int>(c.n_layer_run()) - 1; l >= 0; --l) {
    auto it = col.got.find(layer_path(l, "indexer_topk"));
    if (it != col.got.end())
      next = &it->second;
    else if (next)
      col.got[layer_path(l, "indexer_topk")] = *next;
  }
}

// One pass of the model c: T rows at pos0, S = pos0 + T keys.
struct PassShape {
  int64_t T, pos0, S;
  const ModelConfig& c;
};

// Each take_* below fills `a` (shape and values) from one record, or returns why the record does not fit the
// dataset (then `a` is not written out).

// Rows: [T, tail...] of this pass; CacheRows: the earlier passes' rows then this pass's, [S, tail...].
std::string take_rows(Record& r, const std::string& p, const std::vector<int64_t>& tail, const PassShape& ps, RunState& run,
                      fx::Array& a) {
  const int64_t n = static_cast<int64_t>(r.v.size()), T = ps.T;
  if (n % T != 0) return "ne [" + std::to_string(r.ne[0]) + ", " + std::to_string(r.ne[1]) + ", ...] is not " + std::to_string(T) + " rows";
  int64_t w = n / T, prod = 1;
  for (int64_t d : tail) prod *= d;
  if (prod != w) return "a row holds " + std::to_string(w) + " values, the dataset " + std::to_string(prod);
  if (r.take == Take::CacheRows) {
    std::vector<double>& rows = run.cache_rows[p];
    if (static_cast<int64_t>(rows.size()) != ps.pos0 * w)
      return "the earlier passes left " + std::to_string(rows.size() / std::max<int64_t>(w, 1)) + " cache rows, not " + std::to_string(ps.pos0);
    rows.insert(rows.end(), r.v.begin(), r.v.end());
    a.v = rows;
    a.shape = {ps.S};
  } else {
    a.v = std::move(r.v);
    a.shape = {T};
  }
  a.shape.insert(a.shape.end(), tail.begin(), tail.end());
  return "";
}

// [n_kv, T] scores over the whole KV buffer, cropped to the S keys of this pass: [T, S].
std::string take_crop_keys(const Record& r, const PassShape& ps, fx::Array& a) {
  const int64_t nkv = r.ne[0], T = ps.T, S = ps.S;
  if (r.ne[1] != T || nkv < S || r.ne[2] * r.ne[3] != 1)
    return "ne [" + std::to_string(r.ne[0]) + ", " + std::to_string(r.ne[1]) + "] is not [n_kv >= " + std::to_string(S) + ", " + std::to_string(T) + "]";
  a.shape = {T, S};
  a.v.resize(static_cast<size_t>(T * S));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < S; ++s) a.v[t * S + s] = r.v[t * nkv + s];
  return "";
}

// [k, T] selections: per row the causal picks ascending, padded with -1 to [T, top_k].
std::string take_topk(const Record& r, const PassShape& ps, fx::Array& a) {
  const int64_t k = r.ne[0], K = ps.c.indexer_top_k, T = ps.T;
  if (r.ne[1] != T || r.ne[2] * r.ne[3] != 1 || k > K)
    return "ne [" + std::to_string(r.ne[0]) + ", " + std::to_string(r.ne[1]) + "] is not [k <= " + std::to_string(K) + ", " + std::to_string(T) + "]";
  a.shape = {T, K};
  a.v.assign(static_cast<size_t>(T * K), -1);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> keep;
    for (int64_t j = 0; j < k; ++j) {
      const double cell = r.v[t * k + j];
      if (cell >= 0 && cell <= ps.pos0 + t) keep.push_back(cell);  // cells after the row: masked picks
    }
    std::sort(keep.begin(), keep.end());
    std::copy(keep.begin(), keep.end(), a.v.begin() + t * K);
  }
  return "";
}

// [T, U] expert ids, each row ascending; perm[t][j]: llama.cpp's index of the j-th ascending id (the order
// take_router_order puts the layer's per-expert rows in).
std::string take_router_ids(const Record& r, const PassShape& ps, std::vector<std::vector<int>>& perm, fx::Array& a) {
  const int64_t U = ps.c.n_expert_used, T = ps.T, n = static_cast<int64_t>(r.v.size());
  if (n != T * U) return "holds " + std::to_string(n) + " ids, not T x U = " + std::to_string(T * U);
  a.shape = {T, U};
  a.v.resize(static_cast<size_t>(n));
  perm.assign(static_cast<size_t>(T), std::vector<int>(static_cast<size_t>(U)));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int>& pr = perm[t];
    std::iota(pr.begin(), pr.end(), 0);
    std::stable_sort(pr.begin(), pr.end(), [&](int x, int y) { return r.v[t * U + x] < r.v[t * U + y]; });
    for (int64_t j = 0; j < U; ++j) a.v[t * U + j] = r.v[t * U + pr[j]];
  }
  return "";
}

// [T, U, w] per-expert rows, put in the order of the layer's ascending router ids (perm: nullptr when the pass
// had no router ids for the layer).
std::string take_router_order(const Record& r, const std::vector<int64_t>& tail, const PassShape& ps,
                              const std::vector<std::vector<int>>* perm, fx::Array& a) {
  const int64_t U = ps.c.n_expert_used, T = ps.T, n = static_cast<int64_t>(r.v.size());
  if (!perm) return "no ffn_moe_topk of the layer to order it by";
  if (n % (T * U) != 0) return "holds " + std::to_string(n) + " values, not a multiple of T x U";
  const int64_t w = n / (T * U);
  int64_t prod = 1;
  for (size_t i = 1; i < tail.size(); ++i) prod *= tail[i];
  if (prod != w) return "an expert's row holds " + std::to_string(w) + " values, the dataset " + std::to_string(prod);
  a.shape = {T};
  a.shape.insert(a.shape.end(), tail.begin(), tail.end());
  a.v.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < U; ++j) {
      const int64_t from = (t * U + (*perm)[t][j]) * w;
      std::copy(r.v.begin() + from, r.v.begin() + from + w, a.v.begin() + (t * U + j) * w);
    }
  return "";
}

// [L, T, H] latent rows (head-major) as [T, H, L].
std::string take_latent_permuted(const Record& r, const PassShape& ps, fx::Array& a) {
  const int64_t L = r.ne[0], H = r.ne[2], T = ps.T;
  if (r.ne[1] != T || H != ps.c.n_head || L != ps.c.kv_lora_rank)
    return "ne [" + std::to_string(r.ne[0]) + ", " + std::to_string(r.ne[1]) + ", " + std::to_string(r.ne[2]) + "] is not [L, T, H]";
  a.shape = {T, H, L};
  a.v.resize(r.v.size());
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t)
      std::copy(r.v.begin() + (h * T + t) * L, r.v.begin() + (h * T + t + 1) * L, a.v.begin() + (t * H + h) * L);
  return "";
}

// Turns the records of one pass of T rows at pos0 into the datasets `want` names. Problems (a shape
// that is not the dataset's) are reported in `bad`, never written.
void convert(Collector& col, int64_t T, int64_t pos0, const ModelConfig& c, const fx::ModelDims& dims, RunState& run,
             std::map<std::string, fx::Array>& out, std::vector<std::string>& bad) {
  const PassShape ps{T, pos0, pos0 + T, c};
  share_indexer_topk(col, c);
  std::map<int, std::vector<std::vector<int>>> perm;  // layer -> per row, llama.cpp's index of the j-th ascending id
  // Router ids first: the order of router_weights and expert_out.
  std::vector<std::string> order;
  for (auto& [p, r] : col.got)
    if (r.take == Take::RouterIds) order.insert(order.begin(), p);
    else order.push_back(p);
  for (const std::string& p : order) {
    Record& r = col.got[p];
    const fx::DatasetSpec* spec = fx::spec_for(p);
    if (!spec) {
      bad.push_back(p + " <- " + r.from + ": not a schema dataset");
      continue;
    }
    fx::Array a;
    a.dtype = fx::storage_dtype(spec->cls);
    const std::vector<int64_t> tail = trailing_dims(p, dims);
    const int l = fx::layer_of(p);
    std::string why;
    switch (r.take) {
      case Take::Rows:
      case Take::CacheRows: why = take_rows(r, p, tail, ps, run, a); break;
      case Take::CropKeys: why = take_crop_keys(r, ps, a); break;
      case Take::TopK: why = take_topk(r, ps, a); break;
      case Take::RouterIds: {
        std::vector<std::vector<int>> pl;
        why = take_router_ids(r, ps, pl, a);
        if (why.empty()) perm[l] = std::move(pl);  // only ids that fit order the layer's rows
        break;
      }
      case Take::RouterOrder: {
        auto pit = perm.find(l);
        why = take_router_order(r, tail, ps, pit == perm.end() ? nullptr : &pit->second, a);
        break;
      }
      case Take::LatentPermuted: why = take_latent_permuted(r, ps, a); break;
    }
    if (!why.empty()) {
      bad.push_back(p + " <- " + r.from + ": " + why);
      continue;
    }
    out[p] = std::move(a);
  }
  // input_hidden of layer l > 0 is the output of layer l - 1: the node llama.cpp fed into layer l.
  for (int l = 1; l < c.n_layer_run(); ++l) {
    auto it = out.find(layer_path(l - 1, "output_hidden"));
    if (it != out.end()) out[layer_path(l, "input_hidden")] = it->second;
  }
}

}  // namespace

AnswerResult answer_fixture(const fx::FixtureFile& E, const std::string& gguf, const ModelConfig& c, const AnswerOptions& o) {
  AnswerResult res;
  res.lib_dir = find_library_dir(o.lib_dir, o.python);
  Library lib(res.lib_dir, o.log);
  res.version = lib.version();
  const fx::ModelDims dims = fx::ModelDims::from_config(c);

  // Runs: each forward case (pos0 0), with the decode cases that continue it, in position order.
  struct Run {
    std::string forward;
    std::vector<std::string> steps;
  };
  auto pos0_of = [&](const std::string& ec) {
    auto a = E.case_attrs(ec);
    auto it = a.find("pos0");
    return it == a.end() || it->second.is_string ? int64_t{0} : static_cast<int64_t>(it->second.d);
  };
  std::vector<std::string> decodes;
  std::vector<Run> runs;
  for (const auto& ec : E.cases()) {
    const std::string k = E.case_kind(ec);
    if (k != "full_forward" && k != "decode_step") continue;
    // llama.cpp runs the whole model from token ids: a layer fed synthetic hidden states has no peer.
    auto a = E.case_attrs(ec);
    if (auto it = a.find(fx::attr::kHiddenSource); it != a.end() && it->second.to_string().rfind("synthetic", 0) == 0)
      throw InputError(E.path() + ": case " + ec + " fed synthetic hidden states to its first layer (capture --hidden-source synthetic); "
                       "llama.cpp runs the whole model from the token ids: capture with --hidden-source forward");
    if (k == "full_forward" && pos0_of(ec) == 0) runs.push_back({ec, {}});
    if (k == "decode_step") decodes.push_back(ec);
  }
  std::stable_sort(decodes.begin(), decodes.end(), [&](const auto& a, const auto& b) { return pos0_of(a) < pos0_of(b); });
  for (Run& r : runs) {
    int64_t next = E.read(r.forward, "input_ids").size();
    for (const auto& d : decodes)
      if (pos0_of(d) == next && E.read(d, "input_ids").size() == 1) {
        r.steps.push_back(d);
        ++next;
      }
  }
  if (!o.filter.empty()) {
    std::vector<Run> keep;
    for (const Run& r : runs)
      if (r.forward == o.filter) keep.push_back(r);
    if (keep.empty()) throw InputError("no forward case named " + o.filter + " in " + E.path());
    runs = keep;
  }
  if (runs.empty()) throw InputError(E.path() + ": no forward case to answer (llama.cpp starts from an empty cache)");

  std::set<std::string> unmapped;
  for (const Run& run : runs) {
    int64_t total = E.read(run.forward, "input_ids").size() + static_cast<int64_t>(run.steps.size());
    const uint32_t n_ctx = static_cast<uint32_t>((total + 255) / 256 * 256);
    Collector col;
    col.lib = &lib;
    Library::Session* s = lib.open(gguf, n_ctx, n_ctx, o.threads, o.flash_attn, on_node, &col);
    std::unique_ptr<Library::Session, std::function<void(Library::Session*)>> guard(s, [&](Library::Session* x) { lib.close(x); });
    RunState state;
    std::vector<std::string> cases = {run.forward};
    cases.insert(cases.end(), run.steps.begin(), run.steps.end());
    for (const std::string& ec : cases) {
      fx::Array ids = E.read(ec, "input_ids");
      std::vector<int32_t> tok(ids.v.begin(), ids.v.end());
      const int64_t pos0 = pos0_of(ec), T = static_cast<int64_t>(tok.size());
      for (int32_t id : tok)
        if (id < 0 || id >= c.n_vocab) throw InputError(E.path() + ": case " + ec + " holds token id " + std::to_string(id) + ", outside the vocabulary");
      col.got.clear();
      col.want.clear();
      col.want_take.clear();
      col.kqv_out.clear();
      col.latent_src.clear();
      try {
        lib.decode(s, tok, static_cast<int32_t>(pos0));
      } catch (const NotSupported&) {
        if (col.error.empty()) throw;
      }
      // A callback that failed stopped the graph: its reason, not llama_decode's status, is the news.
      if (!col.error.empty()) throw NotSupported("llama.cpp eval callback: " + col.error);
      std::map<std::string, fx::Array> got;
      std::vector<std::string> bad;
      convert(col, T, pos0, c, dims, state, got, bad);
      for (const auto& b : bad) res.missing.push_back(ec + ": " + b);

      fx::CaseData cd;
      cd.name = ec;
      std::set<int> layers;
      for (const auto& p : E.case_datasets(ec)) {
        if (!fx::spec_for(p) || p == "input_ids") continue;
        auto it = got.find(p);
        if (it == got.end()) {
          // The near-tie gaps and tie flags are mlaconf's bookkeeping of a decision, no node of llama.cpp:
          // compare judges decisions with the expected side's gaps.
          const std::string op = p.substr(p.find_last_of('/') + 1);
          if (fx::tol_class_of(op) != fx::TolClass::Info) res.missing.push_back(ec + ": " + p);
          continue;
        }
        cd.datasets[p] = it->second;
        if (int l = fx::layer_of(p); l >= 0) layers.insert(l);
      }
      res.n_datasets += cd.datasets.size();
      ids.dtype = fx::Dtype::I32;
      cd.datasets["input_ids"] = ids;
      auto ea = E.case_attrs(ec);
      for (const char* k : {fx::attr::kLayers, fx::attr::kOpLevel, "token_source"})
        if (auto it = ea.find(k); it != ea.end()) cd.attrs[k] = it->second.to_string();
      cd.attrs[fx::attr::kKind] = E.case_kind(ec);
      cd.attrs[fx::attr::kCaseName] = ec;
      cd.attrs[fx::attr::kPrecision] = "llamacpp-cpu";
      cd.attrs[fx::attr::kBackend] = "llama.cpp " + res.version;
      cd.attrs[fx::attr::kHiddenSource] = "llama.cpp: real forward pass from the token ids";
      cd.attrs["llama_cpp_flash_attn"] = o.flash_attn < 0 ? "auto" : o.flash_attn ? "on" : "off";
      cd.int_attrs["pos0"] = pos0;
      cd.int_attrs["n_tokens"] = T;
      cd.int_attrs["forced_decisions"] = 0;
      if (auto it = ea.find("has_head"); it != ea.end() && !it->second.is_string) cd.int_attrs["has_head"] = static_cast<int64_t>(it->second.d);
      for (int l : layers) cd.layer_moe[l] = c.is_moe_layer(l) ? 1 : 0;
      if (!o.quiet) std::fprintf(stderr, "answer: %s: %zu datasets from llama.cpp\n", escape_text(ec).c_str(), cd.datasets.size() - 1);
      res.data.cases.push_back(std::move(cd));
    }
    unmapped.insert(col.unmapped.begin(), col.unmapped.end());
  }
  res.unmapped.assign(unmapped.begin(), unmapped.end());
  return res;
}

}  // namespace mlaconf::llamacpp
