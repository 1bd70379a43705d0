// suites/gpu: the per-pass arena of temporaries (optimized/arena.h). What it must keep from the buffer-
// per-temporary path it replaced, each checked here:
//   - every temporary starts poisoned (0xFF bytes: NaN), in every pass, also after an earlier pass
//     wrote the same bytes, and after a replayed CUDA graph of a pass (its poison memset is captured);
//   - temporaries of one pass never overlap, and start 256-byte aligned (as cudaMalloc's);
//   - growth: a pass that does not fit takes buffers of its own (poisoned) and the arena grows after
//     it, to at most max_bytes, moving its memory (workspace_generation changes, so captured graphs are
//     captured again); a pass under capture never grows it; outside a pass, temp_buffer is a buffer of
//     its own; passes do not nest;
//   - the pipeline's results do not depend on it: logits with the arena (default) and without
//     (pass_arena_bytes = 0) are bit-identical (forward prefill + decode, batched decode with graphs).
// Negative controls: bytes written in a pass read back as written (the poison check can fail), and a
// second prompt changes the logits (the comparison can fail).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "optimized/api.h"
#include "optimized/arena.h"
#include "optimized/pipeline.h"
#include "suites/gpu/gpu_test_util.h"

namespace mlaconf::gputest {
namespace {

using test::CaseName;

// Bytes of b that are not 0xFF.
size_t unpoisoned(const cuda::DeviceBuffer& b) {
  std::vector<uint8_t> h(b.bytes());
  if (!h.empty()) b.download(h.data(), h.size());
  size_t n = 0;
  for (uint8_t v : h) n += v != 0xFF;
  return n;
}
uintptr_t addr(const cuda::DeviceBuffer& b) { return reinterpret_cast<uintptr_t>(b.get()); }

// Poison across passes, alignment, no overlap, reuse of the same bytes by the next pass.
void arena_poison() {
  MLACONF_REQUIRE_CUDA();
  const int dev = cuda::current_device();
  cuda::PassArenas a(size_t{64} << 20);
  {  // first pass: the arena is empty, the temporary is a buffer of its own; the demand is recorded
    cuda::PassArenas::Scope pass(a, {dev});
    cuda::DeviceBuffer x = cuda::temp_buffer(1000);
    EXPECT_EQ(a.capacity(dev), 0u);
    EXPECT_EQ(a.demand(dev), 1024u) << "1000 bytes take 1024 (256-byte aligned)";
    EXPECT_EQ(unpoisoned(x), 0u);
  }
  EXPECT_GE(a.capacity(dev), 1536u) << "grown to 1.5x the demand after the pass";
  uintptr_t first = 0;
  {
    cuda::PassArenas::Scope pass(a, {dev});
    cuda::DeviceBuffer x = cuda::temp_buffer(1000), y = cuda::temp_buffer(10);
    first = addr(x);
    EXPECT_EQ(first % 256, 0u);
    EXPECT_EQ(addr(y), first + 1024) << "the next temporary starts after the previous one, aligned";
    EXPECT_EQ(a.used(dev), 1280u);
    EXPECT_EQ(unpoisoned(x), 0u) << "a fresh arena is poisoned";
    x.fill(0x11);
    y.fill(0x22);
    EXPECT_EQ(unpoisoned(x), 1000u) << "negative control: bytes written read back as written";
    EXPECT_EQ(unpoisoned(y), 10u);
  }
  {
    cuda::PassArenas::Scope pass(a, {dev});
    cuda::DeviceBuffer x = cuda::temp_buffer(1000), y = cuda::temp_buffer(10);
    EXPECT_EQ(addr(x), first) << "the next pass reuses the same bytes";
    EXPECT_EQ(unpoisoned(x), 0u) << "bytes the previous pass wrote are poisoned again";
    EXPECT_EQ(unpoisoned(y), 0u);
  }
  cuda::DeviceBuffer outside = cuda::temp_buffer(512);  // no pass: a buffer of its own
  EXPECT_TRUE(addr(outside) < first || addr(outside) >= first + a.capacity(dev));
  EXPECT_EQ(unpoisoned(outside), 0u);
}

// Growth and its cap; the generation; a pass does not nest.
void arena_growth() {
  MLACONF_REQUIRE_CUDA();
  const int dev = cuda::current_device();
  cuda::PassArenas a(size_t{1} << 20);  // at most 1 MiB
  uint64_t gen = cuda::workspace_generation();
  {
    cuda::PassArenas::Scope pass(a, {dev, dev});  // a repeated ordinal: one arena
    EXPECT_THROW(cuda::PassArenas::Scope again(a, {dev}), cuda::CudaError) << "passes do not nest";
    cuda::DeviceBuffer x = cuda::temp_buffer(100000);
    EXPECT_EQ(unpoisoned(x), 0u);
  }
  EXPECT_GT(cuda::workspace_generation(), gen) << "growth moves the arena: captured graphs must know";
  const size_t cap = a.capacity(dev);
  EXPECT_GE(cap, 150016u);
  gen = cuda::workspace_generation();
  {
    cuda::PassArenas::Scope pass(a, {dev});
    cuda::DeviceBuffer x = cuda::temp_buffer(100000);
  }
  EXPECT_EQ(cuda::workspace_generation(), gen) << "a pass that fits moves nothing";
  EXPECT_EQ(a.capacity(dev), cap);
  {  // 3 MiB asked for: 1 MiB at most from the arena, the rest its own buffers, all poisoned
    cuda::PassArenas::Scope pass(a, {dev});
    std::vector<cuda::DeviceBuffer> bufs;
    for (int i = 0; i < 12; ++i) bufs.push_back(cuda::temp_buffer(256 << 10));
    for (const auto& b : bufs) EXPECT_EQ(unpoisoned(b), 0u);
  }
  EXPECT_EQ(a.capacity(dev), size_t{1} << 20) << "capped at max_bytes";
  {
    cuda::PassArenas::Scope pass(a, {dev});
    std::vector<cuda::DeviceBuffer> bufs;
    for (int i = 0; i < 6; ++i) bufs.push_back(cuda::temp_buffer(256 << 10));
    const uintptr_t base = addr(bufs[0]);
    for (int i = 1; i < 4; ++i) EXPECT_EQ(addr(bufs[(size_t)i]), base + (size_t)i * (256 << 10)) << "in the arena";
    for (int i = 4; i < 6; ++i) EXPECT_TRUE(addr(bufs[(size_t)i]) < base || addr(bufs[(size_t)i]) >= base + (1 << 20)) << "beyond it";
  }
  cuda::PassArenas off(0);  // max_bytes 0: never an arena
  {
    cuda::PassArenas::Scope pass(off, {dev});
    cuda::DeviceBuffer x = cuda::temp_buffer(1000);
    EXPECT_EQ(unpoisoned(x), 0u);
  }
  EXPECT_EQ(off.capacity(dev), 0u);
}

// A pass captured in a CUDA graph: replays run its copies and end with its captured poison memset.
void arena_graph() {
  MLACONF_REQUIRE_CUDA();
  const int dev = cuda::current_device();
  cuda::PassArenas a(size_t{16} << 20);
  constexpr size_t n = 4096;
  std::vector<uint8_t> pattern(n);
  for (size_t i = 0; i < n; ++i) pattern[i] = (uint8_t)(i * 7 + 3);
  cuda::DeviceBuffer src = cuda::to_device(pattern), keep(n);
  {  // the warm pass sizes the arena
    cuda::PassArenas::Scope pass(a, {dev});
    cuda::DeviceBuffer x = cuda::temp_buffer(n);
  }
  const uint64_t gen = cuda::workspace_generation();
  uintptr_t x_addr = 0;
  cuda::CudaGraph g;
  g.capture([&] {
    cuda::PassArenas::Scope pass(a, {dev});
    cuda::DeviceBuffer x = cuda::temp_buffer(n);
    x_addr = addr(x);
    cuda::copy2d(x.get(), n, src.get(), n, n, 1);   // the pass writes its temporary
    cuda::copy2d(keep.get(), n, x.get(), n, n, 1);  // and hands it out
  });
  {  // a direct pass dirties the same bytes; its end poisons them
    cuda::PassArenas::Scope pass(a, {dev});
    cuda::DeviceBuffer x = cuda::temp_buffer(n);
    ASSERT_EQ(addr(x), x_addr);
    x.fill(0x5A);
  }
  for (int rep = 0; rep < 3; ++rep) {
    keep.fill(0);
    g.launch();
    cuda::synchronize();
    std::vector<uint8_t> got(n);
    keep.download(got.data(), n);
    EXPECT_EQ(std::memcmp(got.data(), pattern.data(), n), 0) << "replay " << rep << " ran the pass";
    cuda::DeviceBuffer view = cuda::DeviceBuffer::borrowed(reinterpret_cast<void*>(x_addr), n);
    EXPECT_EQ(unpoisoned(view), 0u) << "replay " << rep << ": the captured memset poisoned the temporary again";
    EXPECT_GT(unpoisoned(keep), 0u) << "negative control: the copy out is not poison";
  }
  EXPECT_EQ(cuda::workspace_generation(), gen);
  // A captured pass that does not fit takes buffers of its own and never moves the arena; the next pass
  // outside a capture grows it for the demand the capture recorded.
  cuda::CudaGraph g2;
  g2.capture([&] {
    cuda::PassArenas::Scope pass(a, {dev});
    cuda::DeviceBuffer big = cuda::temp_buffer(size_t{64} << 20);
  });
  EXPECT_EQ(cuda::workspace_generation(), gen) << "a captured pass never moves the arena";
  EXPECT_LT(a.capacity(dev), size_t{64} << 20);
  {
    cuda::PassArenas::Scope pass(a, {dev});
  }
  EXPECT_GT(cuda::workspace_generation(), gen);
  EXPECT_EQ(a.capacity(dev), size_t{16} << 20) << "capped";
}

// The pipeline with and without the arena: the same bits.
std::string tiny_model() {
  const char* env = std::getenv("MLACONF_SHARED_DIR");
  return std::string(env ? env : MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.gguf";
}
std::vector<float> pipeline_run(const GgufFile& f, const ModelConfig& c, int64_t arena_bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto tok = [&] { return (int32_t)(rng() % (uint64_t)c.n_vocab); };
  std::vector<float> all;
  auto add = [&](const std::vector<float>& v) { all.insert(all.end(), v.begin(), v.end()); };
  {  // forward: a prefill (GEMM path) and decode steps
    cuda::PipelineOptions o;
    o.max_ctx = 64;
    o.pass_arena_bytes = arena_bytes;
    cuda::Pipeline p(f, c, o);
    std::vector<int32_t> prompt(20);
    for (auto& t : prompt) t = tok();
    add(p.forward(prompt));
    for (int s = 0; s < 4; ++s) add(p.forward(std::vector<int32_t>{tok()}));
  }
  for (bool graph : {false, true}) {  // batched decode, B = 2, direct and as a graph
    cuda::PipelineOptions o;
    o.max_ctx = 64;
    o.max_seqs = 2;
    o.page_rows = 16;
    o.decode_graph = graph;
    o.overflow_check = !graph;
    o.pass_arena_bytes = arena_bytes;
    cuda::Pipeline p(f, c, o);
    const int s0 = p.open_sequence(), s1 = p.open_sequence();
    add(p.prefill(s0, std::vector<int32_t>{tok(), tok(), tok()}));
    add(p.prefill(s1, std::vector<int32_t>{tok(), tok(), tok(), tok(), tok()}));
    for (int s = 0; s < 5; ++s) add(p.decode_step(std::vector<int>{s0, s1}, std::vector<int32_t>{tok(), tok()}));
    if (graph) {
      EXPECT_EQ(p.graph_replays(), 4);
    }
  }
  return all;
}
void arena_pipeline() {
  MLACONF_REQUIRE_CUDA();
  if (!std::filesystem::exists(tiny_model())) GTEST_SKIP() << "skipped: " << tiny_model() << " is absent";
  GgufFile f = GgufFile::open(tiny_model());
  ModelConfig c = ModelConfig::from_gguf(f);
  const std::vector<float> with = pipeline_run(f, c, int64_t{1} << 30, 5), without = pipeline_run(f, c, 0, 5);
  ASSERT_TRUE(all_finite(with));
  EXPECT_EQ(n_differ(with, without), 0u) << "logits with the arena differ from those without";
  const std::vector<float> other = pipeline_run(f, c, int64_t{1} << 30, 6);
  EXPECT_GT(n_differ(with, other), with.size() / 2) << "negative control: other tokens, other logits";
}

const bool registered = [] {
  register_case("arena", CaseName("pass_arena").p("check", "poison").str(), [] { arena_poison(); });
  register_case("arena", CaseName("pass_arena").p("check", "growth").str(), [] { arena_growth(); });
  register_case("arena", CaseName("pass_arena").p("check", "graph").str(), [] { arena_graph(); });
  register_case("arena", CaseName("pass_arena").p("check", "pipeline").p("model", "glm_dsa_tiny").str(), [] { arena_pipeline(); });
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
