// suites/reference: a Trace that keeps what the reference reports, and the comparison metrics.
#pragma once
#include <cmath>
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

// NMSE = Σ(a-b)² / Σb² over entries where b is finite; entries where exactly one side is finite make
// it +inf (a mask mismatch). Sizes must agree (else +inf).
inline double nmse(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    const bool fa = std::isfinite(a[k]), fb = std::isfinite(b[k]);
    if (fa != fb) return INFINITY;
    if (!fb) continue;
    num += (a[k] - b[k]) * (a[k] - b[k]);
    den += b[k] * b[k];
  }
  return den == 0 ? (num == 0 ? 0 : INFINITY) : num / den;
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v)
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace mlaconf::test
