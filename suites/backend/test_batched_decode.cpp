// Batched decode through the Backend interface (tools/backend/backend.h), as `mlaconf bench --batch` drives it:
// the reference has none and says so (NotSupported naming the backend, before any work); the CUDA backend runs
// B sequences, each row's greedy pick equal to the same sequence decoded alone through the same interface, and
// reports the settings in force.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/argmax.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "suites/core/synth_files.h"
#include "tools/backend/backend.h"

namespace mlaconf::backend_test {
namespace {

struct Model {
  GgufFile f = GgufFile::open(testing_synth::tiny_seed11());
  ModelConfig c = ModelConfig::from_gguf(f);
};

void expect_not_supported(const std::function<void()>& fn, const char* what) {
  try {
    fn();
    ADD_FAILURE() << what << ": no exception";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("reference backend: batched decode is not supported"), std::string::npos)
        << what << ": " << e.what();
  }
}

TEST(BackendBatchedDecode, ReferenceSaysNotSupported) {
  Model m;
  be::BackendOptions o;
  std::unique_ptr<be::Backend> b = be::make_backend("reference", m.f, m.c, o);
  const std::vector<int> seqs = {0};
  const std::vector<int32_t> ids = {1};
  expect_not_supported([&] { b->open_sequence(); }, "open_sequence");
  expect_not_supported([&] { b->close_sequence(0); }, "close_sequence");
  expect_not_supported([&] { b->append_synthetic_context(0, 4, 1); }, "append_synthetic_context");
  expect_not_supported([&] { b->prefill(0, ids); }, "prefill");
  expect_not_supported([&] { b->decode_step_greedy(seqs, ids); }, "decode_step_greedy");
  expect_not_supported([&] { b->decode_steps_greedy(seqs, ids, 2); }, "decode_steps_greedy");
  expect_not_supported([&] { b->decode_settings(); }, "decode_settings");
  EXPECT_EQ(b->graph_replays(), 0);
}

// On a CUDA machine: two sequences decoded together give each the picks it gets decoded alone (batch-invariant
// plan, the default), prefill's logits are the last position's, and the settings are those asked for.
TEST(BackendBatchedDecode, CudaTwoSequencesAsAlone) {
  Model m;
  be::BackendOptions o;
  o.max_ctx = 64;
  o.max_seqs = 2;
  o.overflow_check = false;
  std::unique_ptr<be::Backend> b;
  try {
    b = be::make_backend("cuda", m.f, m.c, o);
  } catch (const NotSupported& e) {
    GTEST_SKIP() << e.what();
  }
  const be::DecodeSettings ds = b->decode_settings();
  EXPECT_FALSE(ds.decode_graph);
  EXPECT_TRUE(ds.split.empty());
  const std::vector<std::vector<int32_t>> prompts = {{5, 9, 13, 2}, {7, 3}};
  auto greedy = [&](const std::vector<int>& which) {  // the sequences `which` decoded together, 3 steps
    std::vector<int> seqs;
    std::vector<int32_t> next;
    for (int i : which) {
      seqs.push_back(b->open_sequence());
      const std::vector<double> lg = b->prefill(seqs.back(), prompts[(size_t)i]);
      EXPECT_EQ((int64_t)lg.size(), m.c.n_vocab);
      next.push_back(argmax_lower(lg));
    }
    std::vector<std::vector<int32_t>> picks = b->decode_steps_greedy(seqs, next, 3);
    for (int s : seqs) b->close_sequence(s);
    return picks;
  };
  const auto both = greedy({0, 1}), first = greedy({0}), second = greedy({1});
  ASSERT_EQ(both.size(), 3u);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(second.size(), 3u);
  for (size_t st = 0; st < 3; ++st) {
    EXPECT_EQ(both[st][0], first[st][0]) << "step " << st;
    EXPECT_EQ(both[st][1], second[st][0]) << "step " << st;
  }
}

}  // namespace
}  // namespace mlaconf::backend_test
