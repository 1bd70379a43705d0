// suites/gpu: the reproducer of a failing op case, proved on the CPU (so it runs in CI, without a GPU).
//
// A planted failure goes through the very helper every op case uses (op_check.h): the reference's
// silu_gate as the "kernel output", with its last n % 8 values never written (NaN, as a poisoned device
// buffer that the gemv-drop-tail fault leaves). The case checks that the check fails, that the
// reproducer holds the inputs, expected, actual and worst positions (the unwritten tail first), that the
// recorded command is the one that selects exactly this case, and then runs that command: the child
// (told by MLACONF_REPRO_SELFTEST_CHILD to let the planted failure fail) runs this one case, fails it,
// writes the same reproducer into its own MLACONF_REPRO_DIR and prints the same command.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "fixtures/h5io.h"
#include "reference/ops.h"
#include "suites/gpu/gpu_test_util.h"
#include "suites/gpu/host_ref.h"
#include "suites/gpu/op_check.h"

namespace mlaconf::gputest {
namespace {

constexpr int64_t kN = 1001;  // n % 8 = 1: one value left unwritten
const char* const kChildEnv = "MLACONF_REPRO_SELFTEST_CHILD";

OpCheck planted_check(const std::string& dir) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  std::vector<float> g(kN), up(kN);
  for (auto& v : g) v = u(rng);
  for (auto& v : up) v = u(rng);
  const MatD want = ref::silu_gate<double>(mat_of(g, 1, kN), mat_of(up, 1, kN));
  std::vector<double> got(want.data(), want.data() + kN);
  for (int64_t i = kN - kN % 8; i < kN; ++i) got[i] = NAN;  // the planted bug: the tail never written
  OpCheck chk(dir);
  chk.input("gate", [g] { return f32_array({kN}, g); });
  chk.input("up", [up] { return f32_array({kN}, up); });
  chk.tensor("out", "f32", {kN}, flat(want), got);
  return chk;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void selftest_case() {
  if (std::getenv(kChildEnv)) {  // the re-run: the planted failure fails this case (into $MLACONF_REPRO_DIR)
    OpCheck chk = planted_check("");
    expect_pass(chk);
    return;
  }
  const std::string root = testing::TempDir() + "/mlaconf_repro_selftest_" + std::to_string(getpid());
  std::filesystem::remove_all(root);
  OpCheck chk = planted_check(root + "/parent");
  ASSERT_FALSE(chk.pass()) << "the planted tail must fail the judge";
  const std::string path = chk.write_repro();
  const std::string name = testing::UnitTest::GetInstance()->current_test_info()->name();
  EXPECT_EQ(path, root + "/parent/" + name + ".h5");
  ASSERT_TRUE(std::filesystem::exists(path));

  fx::H5Reader r(path);
  for (const char* d : {"inputs/gate", "inputs/up", "checks/out/expected", "checks/out/actual", "checks/out/worst_index",
                        "checks/out/worst_abs_error"})
    EXPECT_TRUE(r.exists(d)) << d;
  EXPECT_EQ(r.read("checks/out/expected").shape, std::vector<int64_t>{kN});
  EXPECT_TRUE(std::isnan(r.read("checks/out/actual").v[kN - 1]));
  const fx::Array worst = r.read("checks/out/worst_index");
  ASSERT_FALSE(worst.v.empty());
  EXPECT_EQ(worst.v[0], (double)(kN - 1)) << "the unwritten value is the worst position";
  const auto attrs = r.attrs("/");
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = "'" + exe + "' --gtest_filter='repro." + name + "'";
  EXPECT_EQ(rerun_command(), cmd);
  ASSERT_TRUE(attrs.count("command"));
  EXPECT_EQ(attrs.at("command").s, cmd);
  EXPECT_EQ(attrs.at("case").s, "repro." + name);

  // The printed command re-runs exactly this case: one test, the same failure, the same reproducer.
  const std::string log = root + "/child.log";
  const int st = std::system((std::string(kChildEnv) + "=1 MLACONF_REPRO_DIR='" + root + "/child' " + cmd + " >'" + log + "' 2>&1").c_str());
  ASSERT_TRUE(st != -1 && WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 1) << read_text(log);
  const std::string out = read_text(log);
  EXPECT_NE(out.find("Running 1 test from 1 test suite"), std::string::npos) << out;
  EXPECT_NE(out.find("re-run: " + cmd + "\n"), std::string::npos) << out;
  EXPECT_NE(out.find("reproducer: " + root + "/child/" + name + ".h5"), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(root + "/child/" + name + ".h5"));
  std::filesystem::remove_all(root);
}

const bool registered = [] {
  register_case("repro", "repro_selftest(op=silu_gate,planted=unwritten_tail,n=1001,device=host)", selftest_case);
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
