// mlaconf tools/backend: decisions read from a fixture (see forced_source.h).
#include "tools/backend/forced_source.h"

#include "core/error.h"
#include "fixtures/collector.h"

namespace mlaconf::be {
using fx::Array;

namespace {
std::vector<int32_t> ints(const Array& a) { return std::vector<int32_t>(a.v.begin(), a.v.end()); }
std::vector<int32_t> ints(const Array& a, int64_t begin, int64_t n) {
  return std::vector<int32_t>(a.v.begin() + begin, a.v.begin() + begin + n);
}
}  // namespace

ForcedSource::ForcedSource(const std::string& fixture, const ModelConfig& c, const std::string& model_path)
    : f_(fixture), path_(fixture), c_(c) {
  if (f_.dims()) {
    const std::string d = fx::ModelDims::from_config(c).difference(*f_.dims());
    if (!d.empty()) throw InputError("--force-decisions " + fixture + " is a fixture of another model than " + model_path + ": " + d);
  }
}

std::string ForcedSource::find_case(const std::string& kind, const std::vector<int32_t>& ids, int64_t pos0, int64_t n_new) {
  const std::vector<double> want(ids.begin(), ids.end());
  for (const std::string& cs : f_.cases()) {
    if (f_.case_kind(cs) != kind || !f_.has(cs, "input_ids")) continue;
    if (kind == "decode_step") {
      auto a = f_.case_attrs(cs);
      auto it = a.find("pos0");
      if (it == a.end() || it->second.is_string || static_cast<int64_t>(it->second.d) != pos0) continue;
      // The prompt a decode case follows is in its name: decode(prompt=T,...).
      if (cs.find("prompt=" + std::to_string(ids.size()) + ",") == std::string::npos) continue;
      return cs;
    }
    if (f_.read(cs, "input_ids").v != want) continue;
    if (kind == "greedy" && (!f_.has(cs, "tokens") || f_.read(cs, "tokens").size() != n_new)) continue;
    return cs;
  }
  return "";
}

ForcedDecisions ForcedSource::layer_decisions(const std::string& cs) {
  ForcedDecisions d;
  for (int l = 0; l < c_.n_layer_run(); ++l) {
    const std::string tk = fx::Collector::key(l, "indexer_topk"), ri = fx::Collector::key(l, "router_ids");
    if (f_.has(cs, tk)) d.topk[l] = ints(f_.read(cs, tk));
    if (f_.has(cs, ri)) d.experts[l] = ints(f_.read(cs, ri));
  }
  return d;
}

const ForcedDecisions* ForcedSource::forward(const std::vector<int32_t>& ids, std::string* from) {
  const std::string cs = find_case("full_forward", ids, 0, 0);
  if (cs.empty()) return nullptr;
  *from = cs;
  auto it = cache_.find(cs);
  if (it == cache_.end()) it = cache_.emplace(cs, layer_decisions(cs)).first;
  return it->second.empty() ? nullptr : &it->second;
}

const ForcedDecisions* ForcedSource::decode(const std::vector<int32_t>& ids, int64_t pos, std::string* from) {
  const std::string cs = find_case("decode_step", ids, pos, 0);
  if (cs.empty()) return nullptr;
  *from = cs;
  auto it = cache_.find(cs);
  if (it == cache_.end()) it = cache_.emplace(cs, layer_decisions(cs)).first;
  return it->second.empty() ? nullptr : &it->second;
}

int32_t ForcedSource::decode_token(const std::vector<int32_t>& ids, int64_t pos) {
  const std::string cs = find_case("decode_step", ids, pos, 0);
  if (cs.empty()) return -1;
  Array a = f_.read(cs, "input_ids");
  return a.size() == 1 ? static_cast<int32_t>(a.v[0]) : -1;
}

const ForcedDecisions* ForcedSource::greedy_step(const std::vector<int32_t>& ids, int64_t n_new, int64_t step,
                                                 std::string* from) {
  const std::string cs = find_case("greedy", ids, 0, n_new);
  if (cs.empty()) return nullptr;
  *from = cs + " step " + std::to_string(step);
  const std::string key = *from;
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    ForcedDecisions d;
    const int nl = static_cast<int>(c_.n_layer_run());
    if (f_.has(cs, "step_indexer_topk")) {
      Array a = f_.read(cs, "step_indexer_topk");  // [n, layers, K]
      if (a.shape.size() == 3 && a.shape[1] == nl && step < a.shape[0]) {
        const int64_t K = a.shape[2];
        for (int l = 0; l < nl; ++l) d.topk[l] = ints(a, (step * nl + l) * K, K);
      }
    }
    if (f_.has(cs, "step_router_ids")) {
      Array a = f_.read(cs, "step_router_ids");  // [n, MoE layers, U]
      std::vector<int> moe;
      for (int l = 0; l < nl; ++l)
        if (c_.is_moe_layer(l)) moe.push_back(l);
      if (a.shape.size() == 3 && a.shape[1] == static_cast<int64_t>(moe.size()) && step < a.shape[0]) {
        const int64_t U = a.shape[2];
        for (size_t i = 0; i < moe.size(); ++i) d.experts[moe[i]] = ints(a, (step * a.shape[1] + i) * U, U);
      }
    }
    it = cache_.emplace(key, std::move(d)).first;
  }
  return it->second.empty() ? nullptr : &it->second;
}

int32_t ForcedSource::greedy_token(const std::vector<int32_t>& ids, int64_t n_new, int64_t step, int32_t own) {
  const std::string cs = find_case("greedy", ids, 0, n_new);
  if (cs.empty()) return own;
  Array t = f_.read(cs, "tokens");
  return step < t.size() ? static_cast<int32_t>(t.v[step]) : own;
}

}  // namespace mlaconf::be
