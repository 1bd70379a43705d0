// suites/gpu: packed uploads from pinned memory (optimized/staging.h), the way a pass's small inputs
// (token ids, positions, row tables) reach the device in one asynchronous copy. Checked: each part
// lands at its offset (256-byte aligned) with its bytes; back-to-back uploads queued behind a long copy
// each deliver their own image (the pinned buffer is reused only after its previous copy has read it:
// without that wait the early images would hold the later bytes); an upload while a CUDA graph captures
// is refused; clear() drops parts not uploaded. Negative control: the images differ from each other, so
// a delivered wrong image would not pass.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "optimized/api.h"
#include "optimized/staging.h"
#include "suites/gpu/gpu_test_util.h"

namespace mlaconf::gputest {
namespace {

using test::CaseName;

std::vector<uint8_t> bytes_of(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (uint8_t)((i * 131 + seed * 17 + (i >> 8)) & 0xFF);
  return v;
}

void staging_parts() {
  MLACONF_REQUIRE_CUDA();
  cuda::PinnedUpload up;
  const std::vector<uint8_t> a = bytes_of(12, 1), b = bytes_of(1000, 2), c = bytes_of(300, 3);
  const size_t oa = up.add(a.data(), a.size()), ob = up.add(b.data(), b.size()), oc = up.add(c.data(), c.size());
  EXPECT_EQ(oa, 0u);
  EXPECT_EQ(ob, 256u);
  EXPECT_EQ(oc, 1280u);
  EXPECT_EQ(up.bytes(), 1580u);
  cuda::DeviceBuffer d(up.bytes());
  up.upload(d.get());
  EXPECT_EQ(up.bytes(), 0u) << "the image is empty after its upload";
  std::vector<uint8_t> got(1580);
  d.download(got.data(), got.size());  // a synchronous copy on the same stream: after the upload
  EXPECT_EQ(std::memcmp(got.data() + oa, a.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(got.data() + ob, b.data(), b.size()), 0);
  EXPECT_EQ(std::memcmp(got.data() + oc, c.data(), c.size()), 0);
  up.add(a.data(), a.size());
  up.clear();
  EXPECT_EQ(up.bytes(), 0u);
  EXPECT_EQ(up.add(c.data(), c.size()), 0u) << "clear() starts a new image";
  up.clear();
}

void staging_reuse() {
  MLACONF_REQUIRE_CUDA();
  cuda::PinnedUpload up;
  constexpr int kImages = 24;
  constexpr size_t kBytes = 3000;
  // A long copy first (256 MiB, ~0.1 ms or more): the uploads queue behind it while the host goes on.
  cuda::DeviceBuffer big_src(size_t{256} << 20), big_dst(size_t{256} << 20);
  cuda::copy2d(big_dst.get(), size_t{256} << 20, big_src.get(), size_t{256} << 20, size_t{256} << 20, 1);
  std::vector<cuda::DeviceBuffer> dst;
  for (int i = 0; i < kImages; ++i) {
    const std::vector<uint8_t> img = bytes_of(kBytes, 100 + (uint32_t)i);
    up.add(img.data(), img.size());
    dst.emplace_back(kBytes);
    up.upload(dst.back().get());
  }
  cuda::synchronize();
  for (int i = 0; i < kImages; ++i) {
    std::vector<uint8_t> got(kBytes);
    dst[(size_t)i].download(got.data(), kBytes);
    EXPECT_EQ(std::memcmp(got.data(), bytes_of(kBytes, 100 + (uint32_t)i).data(), kBytes), 0) << "image " << i;
    if (i > 0) {
      EXPECT_NE(std::memcmp(got.data(), bytes_of(kBytes, 99 + (uint32_t)i).data(), kBytes), 0) << "negative control " << i;
    }
  }
}

void staging_capture() {
  MLACONF_REQUIRE_CUDA();
  cuda::PinnedUpload up;
  const std::vector<uint8_t> a = bytes_of(64, 9);
  cuda::DeviceBuffer d(64);
  cuda::CudaGraph g;
  EXPECT_THROW(g.capture([&] {
    up.add(a.data(), a.size());
    up.upload(d.get());
  }),
               cuda::CudaError)
      << "a graph would read the pinned buffer at replay time";
  EXPECT_EQ(up.bytes(), 0u) << "the refused image is dropped";
  up.add(a.data(), a.size());
  up.upload(d.get());  // usable after
  std::vector<uint8_t> got(64);
  d.download(got.data(), 64);
  EXPECT_EQ(std::memcmp(got.data(), a.data(), 64), 0);
}

const bool registered = [] {
  register_case("staging", CaseName("pinned_upload").p("check", "parts").str(), [] { staging_parts(); });
  register_case("staging", CaseName("pinned_upload").p("check", "reuse").str(), [] { staging_reuse(); });
  register_case("staging", CaseName("pinned_upload").p("check", "capture").str(), [] { staging_capture(); });
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
