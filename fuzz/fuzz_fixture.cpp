// libFuzzer target for the fixture reader and the judge (issue 38): every input is written to a scratch
// file and opened the way `mlaconf compare` opens a fixture (FixtureFile: the HDF5 probe in a child
// process, then every case validated, every schema dataset read), then judged against itself
// (compare_files). InputError is the expected outcome for bad input, and a file that crashes libhdf5 is
// one (the probe's refusal, fixtures/h5_probe.h); anything else (a crash, a sanitizer report, another
// exception, an allocation past -malloc_limit_mb) in this process is a finding. The fixture sources are
// compiled into the target (sanitizers, coverage); HDF5 itself is the system library, not instrumented.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "fuzz/scratch_file.h"
#include "fixtures/compare.h"
#include "fixtures/fixture_file.h"
#include "fixtures/schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& p = mlaconf::fuzz::write_scratch(data, size, ".h5");
  using namespace mlaconf;
  try {
    fx::FixtureFile fx(p);
    for (const auto& c : fx.cases()) {
      fx.validate_case(c);
      for (const auto& rel : fx.case_datasets(c))
        if (fx::spec_for(rel)) (void)fx.read(c, rel);
    }
    (void)fx::compare_files(p, p, fx::CompareOptions{});
  } catch (const InputError&) {
  } catch (const NotSupported&) {
  }
  return 0;
}
