// suites/reference: a Trace that keeps what the reference reports (judged through judge_arrays.h).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/trace.h"

namespace mlaconf::test {

struct Record {
  std::vector<int64_t> shape;
  std::vector<double> f;    // float records
  std::vector<int32_t> i;   // int records
};

// Keeps every record of the wanted names (all names when `names` is empty), one entry per call.
class Capture : public Trace {
 public:
  explicit Capture(std::set<std::string> names = {}) : names_(std::move(names)) {}
  bool wants(int, std::string_view name) const override { return names_.empty() || names_.count(std::string(name)); }
  void record(int layer, std::string_view name, const double* d, const std::vector<int64_t>& shape) override {
    Record r{shape, {}, {}};
    r.f.assign(d, d + count(shape));
    recs[{layer, std::string(name)}].push_back(std::move(r));
  }
  void record_i32(int layer, std::string_view name, const int32_t* d, const std::vector<int64_t>& shape) override {
    Record r{shape, {}, {}};
    r.i.assign(d, d + count(shape));
    recs[{layer, std::string(name)}].push_back(std::move(r));
  }
  const std::vector<Record>* get(int layer, const std::string& name) const {
    auto it = recs.find({layer, name});
    return it == recs.end() ? nullptr : &it->second;
  }
  std::map<std::pair<int, std::string>, std::vector<Record>> recs;

 private:
  static size_t count(const std::vector<int64_t>& s) {
    size_t n = 1;
    for (int64_t v : s) n *= static_cast<size_t>(v);
    return n;
  }
  std::set<std::string> names_;
};

}  // namespace mlaconf::test
