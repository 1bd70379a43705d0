// The read floor of `mlaconf bench --batch` (tools/bench_floor.h) on a made-up model whose bytes are known: the
// weights a step reads (one row of token_embd per sequence, the experts B tokens pick under uniform routing, no
// nextn layer), the cache (top-k latent rows, the full layers' keys), and the floor's time at a bandwidth, which
// must follow the bandwidth given (the floor was once computed from a fixed 4229 GB/s whatever the device).
#include <gtest/gtest.h>

#include <vector>

#include "tools/bench_floor.h"

namespace mlaconf::cli {
namespace {

TensorInfo tensor(const char* name, uint64_t nbytes, int64_t rows = 1) {
  TensorInfo t;
  t.name = name;
  t.nbytes = nbytes;
  t.ne = {1, rows, 1, 1};
  return t;
}

// 2 layers run (+ 1 nextn layer), 4 experts of which 2 are used, top-k 8, latent rows of 3 + 1 values, indexer keys
// of 2 values; layer 0 has its own indexer, layer 1 shares it.
ModelConfig made_up_config() {
  ModelConfig c;
  c.n_layer = 3;
  c.n_nextn_layer = 1;
  c.n_expert = 4;
  c.n_expert_used = 2;
  c.indexer_top_k = 8;
  c.kv_lora_rank = 3;
  c.n_rot = 1;
  c.indexer_head_size = 2;
  c.indexer_full = {true, false};
  return c;
}

const std::vector<TensorInfo> kTensors = {
    tensor("token_embd.weight", 1000, 10),      // 100 bytes a row
    tensor("blk.0.attn_q_a.weight", 500),
    tensor("blk.0.ffn_up_exps.weight", 800),    // 200 bytes an expert
    tensor("blk.1.ffn_down_exps.weight", 400),  // 100 bytes an expert
    tensor("blk.2.attn_q_a.weight", 7777),      // the nextn layer: not run, not read
    tensor("output.weight", 300),
};

TEST(BenchFloor, StepBytesOfOneSequence) {
  // Expected experts of 1 token: 4 (1 - (1 - 2/4)^1) = 2. Weights 100 + 500 + 2 x 200 + 2 x 100 + 300.
  // Cache at L = 5 (under top-k 8): 5 rows x 4 values x 2 bytes per layer, + layer 0's 5 keys x 2 x 4 bytes.
  const StepBytes s = step_bytes(kTensors, made_up_config(), 1, 5);
  EXPECT_DOUBLE_EQ(s.weights, 1500.0);
  EXPECT_DOUBLE_EQ(s.cache, 40.0 + 40.0 + 40.0);
  EXPECT_DOUBLE_EQ(s.total(), 1620.0);
}

TEST(BenchFloor, StepBytesOfTwoSequencesAtALongContext) {
  // 2 tokens: 4 (1 - 0.5^2) = 3 experts; 2 rows of token_embd. L = 20: the top-k's 8 latent rows, all 20 keys.
  const StepBytes s = step_bytes(kTensors, made_up_config(), 2, 20);
  EXPECT_DOUBLE_EQ(s.weights, 200.0 + 500.0 + 3 * 200.0 + 3 * 100.0 + 300.0);
  EXPECT_DOUBLE_EQ(s.cache, 2 * (2 * 8 * 4 * 2.0) + 2 * 20 * 2 * 4.0);
}

TEST(BenchFloor, FloorFollowsTheBandwidth) {
  StepBytes s;
  s.weights = 3e9;
  s.cache = 1e9;
  const ReadFloor at4000 = read_floor(s, 8, 4000.0);  // 4e9 bytes at 4e12 B/s: 1 ms, 8 tokens a step
  EXPECT_DOUBLE_EQ(at4000.ms_per_step, 1.0);
  EXPECT_DOUBLE_EQ(at4000.tokens_per_s, 8000.0);
  const ReadFloor at2000 = read_floor(s, 8, 2000.0);  // half the bandwidth: twice the time
  EXPECT_DOUBLE_EQ(at2000.ms_per_step, 2.0);
  EXPECT_DOUBLE_EQ(at2000.tokens_per_s, 4000.0);
  EXPECT_DOUBLE_EQ(percent_of_floor(at4000, 2.0), 50.0);
  EXPECT_DOUBLE_EQ(percent_of_floor(at2000, 2.0), 100.0);
  EXPECT_DOUBLE_EQ(percent_of_floor(at4000, 0.0), 0.0);  // no step timed
}

}  // namespace
}  // namespace mlaconf::cli
