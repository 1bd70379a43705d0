// suites/common: a Trace that keeps every record of a pass in memory, by (layer, name), for the suites that
// check one pass's records against another pass's or against their own arithmetic (layer -1: the model's
// records outside the layers, as the pipeline and the reference write them).
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/trace.h"

namespace mlaconf::test {

struct MemTrace : Trace {
  struct Rec {
    std::vector<double> v;   // a float record's values (empty for an id record)
    std::vector<int32_t> i;  // an id record's values (empty for a float record)
    std::vector<int64_t> shape;
  };
  std::map<std::pair<int, std::string>, Rec> recs;

  void record(int layer, std::string_view name, const double* d, const std::vector<int64_t>& shape) override {
    recs[{layer, std::string(name)}] = Rec{std::vector<double>(d, d + count(shape)), {}, shape};
  }
  void record_i32(int layer, std::string_view name, const int32_t* d, const std::vector<int64_t>& shape) override {
    recs[{layer, std::string(name)}] = Rec{{}, std::vector<int32_t>(d, d + count(shape)), shape};
  }
  static int64_t count(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (auto x : s) n *= x;
    return n;
  }
  // The record, or nullptr when the pass wrote none of that name.
  const Rec* get(int layer, std::string_view name) const {
    auto it = recs.find({layer, std::string(name)});
    return it == recs.end() ? nullptr : &it->second;
  }
  // The record; a pass without it is a broken test setup (std::runtime_error naming it).
  const Rec& at(int layer, std::string_view name) const {
    const Rec* r = get(layer, name);
    if (!r) throw std::runtime_error("trace lacks layer " + std::to_string(layer) + " " + std::string(name));
    return *r;
  }
};

}  // namespace mlaconf::test
