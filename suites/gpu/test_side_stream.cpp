// suites/gpu: SideStream (optimized/api.h), the per-device side stream a decode step queues a full layer's
// indexer on, beside its query path. Checked, directly and as a captured CUDA graph replayed three times:
//   - the side stream's work comes after the work queued on the current stream before the fork (it reads
//     what that work wrote), and the current stream's work after join() comes after the side stream's
//     (it reads what the side wrote last, behind a chain of slow launches that would otherwise still run);
//   - after refork() the side stream's work also comes after what the current stream queued since the fork;
//   - run() does not nest (cuda::CudaError).
// The side's own scratch slots (the indexer's tensor-core GEMVs beside the query path's) are checked by the
// pipeline's graph decode cases (batch.*graph*: each sequence bit-identical to decoding alone).
// Negative control: the values the side must deliver differ from what its output held before.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "optimized/api.h"
#include "suites/gpu/gpu_test_util.h"

namespace mlaconf::gputest {
namespace {

using test::CaseName;

constexpr int64_t kN = int64_t{1} << 24;  // 64 MB per buffer: each launch takes tens of microseconds

// a = 2 (main), fork, side: b = a then b *= 1 four times, join, main: d = b.
void queue_steps(float* a, float* b, float* d) {
  cuda::scale_inplace(a, kN, 2.f);
  cuda::SideStream side;
  side.run([&] {
    cuda::copy2d(b, 4096, a, 4096, 4096, kN * 4 / 4096);
    for (int i = 0; i < 4; ++i) cuda::scale_inplace(b, kN, 1.f);
  });
  side.join();
  cuda::copy2d(d, 4096, b, 4096, 4096, kN * 4 / 4096);
}

// refork(): a = 2 (main), fork, side: c = a; main: a *= 3 then a *= 1 four times (a slow chain), refork, side:
// b = a, join, main: d = b. Without the second fork the side would copy a while the main chain still runs.
void queue_refork_steps(float* a, float* b, float* c, float* d) {
  cuda::scale_inplace(a, kN, 2.f);
  cuda::SideStream side;
  side.run([&] { cuda::copy2d(c, 4096, a, 4096, 4096, kN * 4 / 4096); });
  cuda::scale_inplace(a, kN, 3.f);
  for (int i = 0; i < 4; ++i) cuda::scale_inplace(a, kN, 1.f);
  side.refork();
  side.run([&] { cuda::copy2d(b, 4096, a, 4096, 4096, kN * 4 / 4096); });
  side.join();
  cuda::copy2d(d, 4096, b, 4096, 4096, kN * 4 / 4096);
}

// Elements of buffer x (kN floats) that are not v.
int64_t not_equal(const cuda::DeviceBuffer& x, float v) {
  const std::vector<float> h = cuda::to_host<float>(x, kN);
  int64_t n = 0;
  for (float f : h) n += f != v;
  return n;
}

// Runs queue(a, b, c, d) from a = 1, b = d = 0, directly or captured once and replayed three times, and checks
// b and d equal `want` after each run; side_msg says what a wrong b means.
void check_order(bool graph, float want, const std::function<void(float*, float*, float*, float*)>& queue, const std::string& side_msg) {
  MLACONF_REQUIRE_CUDA();
  const std::vector<float> ones(kN, 1.f);
  cuda::DeviceBuffer a(kN * 4), b(kN * 4), c(kN * 4), d(kN * 4);
  auto reset = [&] {
    a.upload(ones.data(), kN * 4);
    b.fill(0);
    d.fill(0);
    cuda::synchronize();
    ASSERT_EQ(not_equal(d, want), kN) << "negative control: d holds no " << want << " before the steps";
  };
  auto check = [&](const std::string& when) {
    EXPECT_EQ(not_equal(b, want), 0) << when << side_msg;
    EXPECT_EQ(not_equal(d, want), 0) << when << "the main stream read b before the side stream finished";
  };
  auto run = [&] { queue(a.as<float>(), b.as<float>(), c.as<float>(), d.as<float>()); };
  if (!graph) {
    reset();
    run();
    cuda::synchronize();
    check("");
    return;
  }
  { cuda::SideStream warm; }  // the side stream and its events exist before the capture, as a decode's warm step makes them
  cuda::CudaGraph g;
  g.capture(run);
  for (int rep = 0; rep < 3; ++rep) {
    reset();
    g.launch();
    cuda::synchronize();
    check("replay " + std::to_string(rep) + ": ");
  }
}

void side_stream_order(bool graph) {
  check_order(graph, 2.f, [](float* a, float* b, float*, float* d) { queue_steps(a, b, d); },
              "the side read a before the main stream's scaling");
}

void side_stream_refork(bool graph) {
  check_order(graph, 6.f, queue_refork_steps, "the side read a before the main stream's work queued before refork()");
}

void side_stream_nesting() {
  MLACONF_REQUIRE_CUDA();
  cuda::SideStream side;
  side.run([&] { EXPECT_THROW(side.run([] {}), cuda::CudaError); });
  side.run([&] { EXPECT_THROW(side.refork(), cuda::CudaError) << "refork inside run()"; });
  EXPECT_THROW(cuda::SideStream{}.run([] { cuda::SideStream inner; }), cuda::CudaError) << "a fork inside run()";
  side.join();
  cuda::synchronize();
}

const bool registered = [] {
  for (bool graph : {false, true})
    register_case("streams", CaseName("side_stream").p("check", "order").p("graph", graph ? 1 : 0).str(),
                  [graph] { side_stream_order(graph); });
  for (bool graph : {false, true})
    register_case("streams", CaseName("side_stream").p("check", "refork").p("graph", graph ? 1 : 0).str(),
                  [graph] { side_stream_refork(graph); });
  register_case("streams", CaseName("side_stream").p("check", "nesting").str(), [] { side_stream_nesting(); });
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
