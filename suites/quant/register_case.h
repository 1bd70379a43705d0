// suites/quant: registering tests under canonical case names (testing::RegisterTest), since gtest's
// parameterised names cannot hold "(", "=" or ",". Names must avoid '-', ':', '*' and '?', which
// --gtest_filter treats as syntax.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>

namespace mlaconf::test {

class CaseTest : public testing::Test {
 public:
  explicit CaseTest(std::function<void()> body) : body_(std::move(body)) {}
  void TestBody() override { body_(); }

 private:
  std::function<void()> body_;
};

inline void register_case(const char* suite, const std::string& name, std::function<void()> body,
                          const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  testing::RegisterTest(suite, name.c_str(), nullptr, nullptr, file, line,
                        [body]() -> testing::Test* { return new CaseTest(body); });
}

inline std::string shared_path(const std::string& rel) { return std::string(MLACONF_SHARED_DIR) + "/" + rel; }

}  // namespace mlaconf::test
