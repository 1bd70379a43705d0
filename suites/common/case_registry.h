// suites/common: the one way every suite registers a test under its canonical case name.
//
// Canonical names such as `sparse_mla_decode(h=64,d=576,topk=2048,L=32768,dtype=f16)` cannot be gtest
// parameter names, so cases are registered with testing::RegisterTest. ctest runs each case with
// --gtest_filter=<suite>.<name>, where '-' starts the negative patterns and '*', '?', ':' are pattern
// syntax: a name holding one of them would select nothing and "pass" (suites/CMakeLists.txt also fails
// a case that runs zero tests). Such a name is refused at registration, loudly.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace mlaconf::test {

class CaseTest : public testing::Test {
 public:
  explicit CaseTest(std::function<void()> body) : body_(std::move(body)) {}
  void TestBody() override { body_(); }

 private:
  std::function<void()> body_;
};

inline bool is_filterable_case_name(const std::string& name) { return name.find_first_of("-*?:") == std::string::npos; }

inline void register_case(const char* suite, const std::string& name, std::function<void()> body,
                          const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (!is_filterable_case_name(name))
    throw std::logic_error(std::string("case name with a gtest filter character ('-', '*', '?', ':'): ") + suite + "." + name);
  testing::RegisterTest(suite, name.c_str(), nullptr, nullptr, file, line,
                        [body = std::move(body)]() -> testing::Test* { return new CaseTest(body); });
}

// A canonical name built from the case's parameters, in the order given: CaseName("gemv").p("type", "Q4_K")
// .p("rows", 1001).str() == "gemv(type=Q4_K,rows=1001)". Numbers print as std::to_string does (integers).
class CaseName {
 public:
  explicit CaseName(std::string op) : op_(std::move(op)) {}
  template <class V>
  CaseName& p(const char* key, const V& value) {
    params_ += (params_.empty() ? "" : ",") + std::string(key) + "=";
    if constexpr (std::is_arithmetic_v<V>) params_ += std::to_string(value);
    else params_ += std::string(value);
    return *this;
  }
  std::string str() const { return op_ + "(" + params_ + ")"; }
  operator std::string() const { return str(); }

 private:
  std::string op_, params_;
};

}  // namespace mlaconf::test
