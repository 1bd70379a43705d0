// suites/gpu: judgement and reproducers of op-level cases (see op_check.h).
#include "suites/gpu/op_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "fixtures/compare.h"
#include "optimized/api.h"
#include "suites/quant/float_compare.h"

namespace mlaconf::gputest {
namespace {

constexpr int kWorst = 16;                  // positions kept per failing tensor
constexpr int64_t kMaxInputValues = 1 << 26;  // a larger input is named in the file, not stored

fx::Array make_array(fx::Dtype dt, std::vector<int64_t> shape, std::vector<double> v) {
  fx::Array a;
  a.dtype = dt;
  a.shape = std::move(shape);
  a.v = std::move(v);
  return a;
}

// Flat positions of the largest errors (non-finite mismatches first), worst first.
void worst_positions(const std::vector<double>& e, const std::vector<double>& a, std::vector<int64_t>* pos,
                     std::vector<double>* err) {
  std::vector<std::pair<double, int64_t>> all;
  all.reserve(e.size());
  for (size_t i = 0; i < e.size(); ++i) {
    const bool fe = std::isfinite(e[i]), fa = std::isfinite(a[i]);
    double d = 0;
    if (fe && fa) d = std::fabs(a[i] - e[i]);
    else if (!(std::isnan(e[i]) && std::isnan(a[i])) && !(e[i] == a[i])) d = INFINITY;
    if (d > 0) all.emplace_back(d, (int64_t)i);
  }
  const size_t k = std::min<size_t>(kWorst, all.size());
  std::partial_sort(all.begin(), all.begin() + k, all.end(),
                    [](const auto& x, const auto& y) { return x.first > y.first || (x.first == y.first && x.second < y.second); });
  for (size_t i = 0; i < k; ++i) pos->push_back(all[i].second), err->push_back(all[i].first);
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

std::string repro_dir() {
  const char* e = std::getenv("MLACONF_REPRO_DIR");
  return e && *e ? e : "repro";
}

std::string current_case() {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  return info ? std::string(info->test_suite_name()) + "." + info->name() : "unknown.unknown";
}

std::string rerun_command() {
  std::error_code ec;
  std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec || exe.empty()) exe = "mlaconf_gpu_tests";
  return "'" + exe + "' --gtest_filter='" + current_case() + "'";
}

fx::Array f64_array(std::vector<int64_t> shape, const std::vector<double>& v) { return make_array(fx::Dtype::F64, std::move(shape), v); }
fx::Array f32_array(std::vector<int64_t> shape, const std::vector<float>& v) {
  return make_array(fx::Dtype::F32, std::move(shape), std::vector<double>(v.begin(), v.end()));
}
fx::Array f16_array(std::vector<int64_t> shape, const std::vector<uint16_t>& bits) {
  std::vector<double> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = cuda::half_bits_to_float_host(bits[i]);
  return make_array(fx::Dtype::F32, std::move(shape), std::move(v));
}
fx::Array i32_array(std::vector<int64_t> shape, const std::vector<int32_t>& v) {
  return make_array(fx::Dtype::I32, std::move(shape), std::vector<double>(v.begin(), v.end()));
}
fx::Array u8_array(std::vector<int64_t> shape, const std::vector<uint8_t>& v) {
  return make_array(fx::Dtype::U8, std::move(shape), std::vector<double>(v.begin(), v.end()));
}

void OpCheck::Judged::keep(fx::Dtype dt, const std::vector<int64_t>& shape, std::vector<double> e, std::vector<double> a) {
  const bool same = e.size() == a.size();
  expected = make_array(dt, shape, std::move(e));
  actual = make_array(dt, same ? shape : std::vector<int64_t>{(int64_t)a.size()}, std::move(a));
}

OpCheck::OpCheck(std::string dir) : dir_(dir.empty() ? repro_dir() : std::move(dir)) {}

void OpCheck::input(const std::string& name, std::function<fx::Array()> make) { inputs_.emplace_back(name, std::move(make)); }

void OpCheck::add(Judged j, bool ok) {
  char b[512];
  std::snprintf(b, sizeof b, "  %s (%s): %s, %s\n", j.name.c_str(), j.cls.c_str(), ok ? "pass" : "FAIL", j.note.c_str());
  summary_ += b;
  if (!ok) {
    ++failures_;
    judged_.push_back(std::move(j));
  }
}

bool OpCheck::tensor(const std::string& name, const std::string& precision, const std::vector<int64_t>& shape,
                     const std::vector<double>& expected, const std::vector<double>& actual) {
  Judged j(name, std::string(fx::tol_class_name(fx::tol_class_of(name))) + "@" + precision);
  bool ok = false;
  if (expected.size() != actual.size()) {
    j.note = "sizes differ: expected " + std::to_string(expected.size()) + " values, actual " + std::to_string(actual.size());
  } else {
    const fx::DatasetResult v = fx::judge_tensor(name, make_array(fx::Dtype::F64, shape, expected),
                                                 make_array(fx::Dtype::F64, shape, actual), precision);
    ok = v.verdict == fx::Verdict::Pass;
    char b[256];
    std::snprintf(b, sizeof b, "nmse %.3g max_rel %.3g cosine 1-%.3g over %lld values%s", v.nmse, v.max_rel, 1 - v.cosine,
                  (long long)v.n, ok ? "" : ": ");
    j.note = b + v.note;
    if (!ok) {
      j.keep(fx::Dtype::F64, shape, expected, actual);
      worst_positions(expected, actual, &j.worst, &j.worst_err);
    }
  }
  add(std::move(j), ok);
  return ok;
}

bool OpCheck::exact(const std::string& name, const std::vector<int64_t>& shape, const std::vector<int32_t>& expected,
                    const std::vector<int32_t>& actual) {
  Judged j(name, "exact");
  int64_t differ = 0;
  for (size_t i = 0; i < expected.size() && i < actual.size(); ++i)
    if (expected[i] != actual[i] && differ++ < kWorst) j.worst.push_back((int64_t)i), j.worst_err.push_back(1.0);
  const bool ok = expected.size() == actual.size() && differ == 0;
  j.note = std::to_string(differ) + " of " + std::to_string(expected.size()) + " values differ" +
           (expected.size() == actual.size() ? "" : " (and the sizes differ)");
  if (!ok) j.keep(fx::Dtype::I32, shape, {expected.begin(), expected.end()}, {actual.begin(), actual.end()});
  add(std::move(j), ok);
  return ok;
}

bool OpCheck::bits(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& expected,
                   const std::vector<float>& actual) {
  Judged j(name, "bit-exact");
  bool ok = false;
  if (expected.size() != actual.size()) {
    j.note = "sizes differ";
  } else {
    const test::BitCompare c = test::compare_bits(actual.data(), expected.data(), (int64_t)expected.size());
    ok = c.exact();
    j.note = std::to_string(c.mismatches) + " of " + std::to_string(c.n) + " values differ in their bits" + c.first;
    for (size_t i = 0; i < expected.size() && (int)j.worst.size() < kWorst; ++i)
      if (test::float_bits(expected[i]) != test::float_bits(actual[i]))
        j.worst.push_back((int64_t)i), j.worst_err.push_back(std::fabs((double)actual[i] - expected[i]));
  }
  if (!ok) j.keep(fx::Dtype::F32, shape, {expected.begin(), expected.end()}, {actual.begin(), actual.end()});
  add(std::move(j), ok);
  return ok;
}

std::string OpCheck::write_repro() {
  if (pass() || !written_.empty()) return written_;
  std::string name = current_case();
  name = name.substr(name.find('.') + 1);
  std::replace(name.begin(), name.end(), '/', '_');
  std::filesystem::create_directories(dir_);
  const std::string path = std::filesystem::absolute(dir_).string() + "/" + name + ".h5";
  fx::H5Writer w(path);
  w.ensure_group("inputs");
  std::string omitted;
  for (auto& [n, make] : inputs_) {
    const fx::Array a = make();
    if (a.size() <= kMaxInputValues) w.write("inputs/" + n, a);
    else omitted += (omitted.empty() ? "" : ", ") + n + " " + a.shape_string();
  }
  if (!omitted.empty()) w.attr_string("inputs", "omitted_too_large", omitted);
  for (const Judged& j : judged_) {
    const std::string g = "checks/" + j.name;
    w.ensure_group(g);
    if (!j.expected.v.empty()) w.write(g + "/expected", j.expected);
    if (!j.actual.v.empty()) w.write(g + "/actual", j.actual);
    if (!j.worst.empty()) {
      w.write(g + "/worst_index", make_array(fx::Dtype::I64, {(int64_t)j.worst.size()},
                                             std::vector<double>(j.worst.begin(), j.worst.end())));
      w.write(g + "/worst_abs_error", make_array(fx::Dtype::F64, {(int64_t)j.worst_err.size()}, j.worst_err));
    }
    w.attr_string(g, "judge", j.cls);
    w.attr_string(g, "verdict", "fail");
    w.attr_string(g, "note", j.note);
    w.attr_string(g, "shape", shape_text(j.expected.shape));
  }
  w.attr_string("/", "case", current_case());
  w.attr_string("/", "command", rerun_command());
  w.attr_string("/", "format", "mlaconf gpu op reproducer 1 (inputs/*, checks/<tensor>/{expected,actual,worst_index,worst_abs_error})");
  w.commit();
  written_ = path;
  return written_;
}

void expect_pass(OpCheck& c) {
  std::printf("%s", c.summary().c_str());
  if (c.pass()) return;
  std::string path;
  try {
    path = c.write_repro();
  } catch (const std::exception& e) {
    path = std::string("(not written: ") + e.what() + ")";
  }
  std::printf("reproducer: %s\nre-run: %s\n", path.c_str(), rerun_command().c_str());
  std::fflush(stdout);
  ADD_FAILURE() << "op check failed:\n" << c.summary() << "reproducer: " << path << "\nre-run: " << rerun_command();
}

}  // namespace mlaconf::gputest
