// Reads a fixture and judges it against itself through the installed mlaconf::fixtures.
#include <cstdio>

#include "fixtures/compare.h"
#include "fixtures/first_failure.h"
#include "fixtures/fixture_file.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer FIXTURE.h5\n");
    return 2;
  }
  try {
    mlaconf::fx::FixtureFile f(argv[1]);
    auto cases = f.cases();
    if (cases.empty()) return 1;
    auto ids = f.read(cases.front(), "input_ids");
    mlaconf::fx::CompareReport r = mlaconf::fx::compare_files(argv[1], argv[1]);
    std::printf("consumer: %zu case(s), %s holds %lld input ids, %zu datasets judged, first failure %s: %s\n", cases.size(),
                cases.front().c_str(), static_cast<long long>(ids.size()), r.results.size(), mlaconf::fx::first_failure_text(r).c_str(),
                r.pass() ? "PASS" : "FAIL");
    return r.pass() && !r.results.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: error: %s\n", e.what());
    return 2;
  }
}
