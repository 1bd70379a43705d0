// suites/reference: the reference's values do not depend on its thread count (reference/threads.h).
//  - the parallel ops (linear, indexer scores and top-k, absorbed / naive sparse MLA, per-head products)
//    at 2, 3 and 5 threads give the same bits as at 1, on shapes whose row counts are not multiples of
//    the block alignment;
//  - a whole forward pass of the tiny model, past top_k and past one piece of attention rows
//    (T = 300 > 256), records the same bits for every dataset at 1, 2 and 3 threads, f64 and f32;
//  - attention in pieces of rows (model.cpp) gives the bits of one call over all rows;
//  - routed experts in flight side by side (moe.h MoeRun) give the bits of the experts one after another,
//    with uneven expert loads, as an op and in a whole forward pass at a capture's settings.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/model_config.h"
#include "reference/indexer.h"
#include "reference/mla.h"
#include "reference/moe.h"
#include "reference/model.h"
#include "reference/ops.h"
#include "reference/threads.h"
#include "reference/weights.h"
#include "suites/common/case_registry.h"
#include "suites/reference/capture.h"
#include "suites/reference/oracle_h5.h"

namespace mlaconf::test {
namespace {

const std::string kModel = std::string(MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.gguf";
const std::string kOracle = std::string(MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.oracle.h5";
const int kCounts[] = {2, 3, 5};

// Restores the default thread count when a case ends, passed or not.
struct ThreadsGuard {
  ~ThreadsGuard() { ref::set_threads(0); }
};

template <class S>
ref::Mat<S> random_mat(int64_t r, int64_t c, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  ref::Mat<S> m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<S>(n(g));
  return m;
}

template <class M>
bool same_bits(const M& a, const M& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(typename M::Scalar) * static_cast<size_t>(a.size())) == 0;
}

// Every parallel op at 1 thread and at kCounts threads.
template <class S>
void ops_same_bits() {
  ThreadsGuard guard;
  const int64_t T = 203, E = 96, H = 4, Dl = 40, R = 8, nope = 12, Hi = 3, Di = 16, pos0 = 5, topk = 37;
  // linear() by token rows (a weight of 70 rows) and by weight rows (300: 3 threads get 96, 96, 108), at
  // T = 203, 40 and 1 (a product with one row is a matrix-vector product).
  const ref::Mat<S> x = random_mat<S>(T, E, 1), W = random_mat<S>(70, E, 2), Wbig = random_mat<S>(300, E, 8);
  const ref::Mat<S> qi = random_mat<S>(T, Hi * Di, 3), ki = random_mat<S>(pos0 + T, Di, 4), wi = random_mat<S>(T, Hi, 5);
  const ref::Mat<S> cache = random_mat<S>(pos0 + T, Dl + R, 6), q = random_mat<S>(T, H * (nope + R), 7);
  std::vector<ref::Mat<S>> kb, vb;
  for (int64_t h = 0; h < H; ++h) {
    kb.push_back(random_mat<S>(Dl, nope, 10 + h));
    vb.push_back(random_mat<S>(24, Dl, 20 + h));
  }
  struct Out {
    ref::Mat<S> lin, lin_big, lin_40, lin_1, scores, qabs, olat, v, naive;
    ref::MatI topk;
  };
  auto run = [&] {
    Out o;
    o.lin = ref::linear<S>(x, W);
    o.lin_big = ref::linear<S>(x, Wbig);
    o.lin_40 = ref::linear<S>(x.topRows(40), Wbig);
    o.lin_1 = ref::linear<S>(x.topRows(1), Wbig);
    o.scores = ref::indexer_scores<S>(qi, ki, wi, Hi, pos0);
    o.topk = ref::topk_lower_index<S>(o.scores, topk).idx;
    o.qabs = ref::absorb_query_rows<S>(q, kb, nope);
    o.olat = ref::sparse_mla_absorbed_rows<S>(o.qabs, cache, o.topk, Dl, 0.125);
    o.v = ref::apply_v_up_rows<S>(o.olat, vb);
    o.naive = ref::sparse_mla_naive_rows<S>(q, cache, o.topk, kb, vb, 0.125);
    return o;
  };
  ref::set_threads(1);
  const Out one = run();
  for (int n : kCounts) {
    ref::set_threads(n);
    const Out got = run();
    const std::string at = std::to_string(n) + " threads";
    EXPECT_TRUE(same_bits(one.lin, got.lin)) << "linear by token rows, " << at;
    EXPECT_TRUE(same_bits(one.lin_big, got.lin_big)) << "linear by weight rows, " << at;
    EXPECT_TRUE(same_bits(one.lin_40, got.lin_40)) << "linear by weight rows, 40 tokens, " << at;
    EXPECT_TRUE(same_bits(one.lin_1, got.lin_1)) << "linear by weight rows, 1 token, " << at;
    EXPECT_TRUE(same_bits(one.scores, got.scores)) << "indexer_scores, " << at;
    EXPECT_TRUE(same_bits(one.topk, got.topk)) << "topk_lower_index, " << at;
    EXPECT_TRUE(same_bits(one.qabs, got.qabs)) << "absorb_query_rows, " << at;
    EXPECT_TRUE(same_bits(one.olat, got.olat)) << "sparse_mla_absorbed_rows, " << at;
    EXPECT_TRUE(same_bits(one.v, got.v)) << "apply_v_up_rows, " << at;
    EXPECT_TRUE(same_bits(one.naive, got.naive)) << "sparse_mla_naive_rows, " << at;
  }
}

// The prompt200 ids, repeated to T tokens.
std::vector<int32_t> ids_of(int64_t T) {
  H5File h(kOracle);
  const std::vector<int32_t> p = h.read_i32("/prompt200/input_ids");
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < T; ++i) ids.push_back(p[static_cast<size_t>(i) % p.size()]);
  return ids;
}

// Every record of `got` has the bits of the same record of `one`.
void expect_same_records(const Capture& one, const Capture& got, const std::string& at) {
  ASSERT_EQ(one.recs.size(), got.recs.size()) << at;
  for (const auto& [key, recs] : one.recs) {
    const auto* g = got.get(key.first, key.second);
    ASSERT_NE(g, nullptr) << key.second;
    ASSERT_EQ(recs.size(), g->size()) << key.second;
    for (size_t i = 0; i < recs.size(); ++i) {
      // Bytes, not ==: the top-k gap is NaN on rows with at most top_k keys.
      const auto& a = recs[i].f;
      const auto& b = (*g)[i].f;
      const bool same = recs[i].shape == (*g)[i].shape && recs[i].i == (*g)[i].i && a.size() == b.size() &&
                        (a.empty() || std::memcmp(a.data(), b.data(), sizeof(double) * a.size()) == 0);  // memcmp(nullptr, ...) is UB (UBSan)
      EXPECT_TRUE(same) << "layer " << key.first << " " << key.second << " differs at " << at;
    }
  }
}

// Every record of a forward pass (all names, every layer, logits) at 1 thread and at 2 and 3.
template <class S>
void forward_same_bits() {
  if (!std::filesystem::exists(kOracle)) GTEST_SKIP() << "skipped: shared data absent (" << kOracle << ")";
  ThreadsGuard guard;
  const GgufFile f = GgufFile::open(kModel);
  const ModelConfig c = ModelConfig::from_gguf(f);
  const std::vector<int32_t> ids = ids_of(300);
  ASSERT_GT(300, c.indexer_top_k) << "the case must have rows past top_k";
  auto run = [&](int n, Capture& cap) {
    ref::set_threads(n);
    ref::Model<S> m(f, c);
    return m.forward(ids, &cap);
  };
  Capture one;
  const ref::Mat<S> logits = run(1, one);
  for (int n : {2, 3}) {
    Capture got;
    EXPECT_TRUE(same_bits(logits, run(n, got))) << "logits at " << n << " threads";
    expect_same_records(one, got, std::to_string(n) + " threads");
  }
}

// The attention of a forward pass in pieces of rows equals one call over all rows: attn_latent_out
// recomputed from the pass's own q_absorbed, latent cache and selection, bit for bit (f64).
void pieces_equal_whole() {
  if (!std::filesystem::exists(kOracle)) GTEST_SKIP() << "skipped: shared data absent (" << kOracle << ")";
  const GgufFile f = GgufFile::open(kModel);
  const ModelConfig c = ModelConfig::from_gguf(f);
  const std::vector<int32_t> ids = ids_of(300);
  ref::Model<double> m(f, c);
  Capture cap({op::kQAbsorbed, op::kAttnLatentOut, op::kIndexerTopk});
  m.forward(ids, &cap);
  const int64_t T = 300, H = c.n_head, D = c.latent_dim(), dl = c.kv_lora_rank;
  for (int64_t l = 0; l < c.n_layer_run(); ++l) {
    const Record& qa = cap.get(static_cast<int>(l), op::kQAbsorbed)->back();
    const Record& ol = cap.get(static_cast<int>(l), op::kAttnLatentOut)->back();
    const Record& tk = cap.get(static_cast<int>(l), op::kIndexerTopk)->back();
    const ref::Mat<double> q = Eigen::Map<const ref::Mat<double>>(qa.f.data(), T, H * D);
    const ref::MatI sel = Eigen::Map<const ref::MatI>(tk.i.data(), T, tk.shape[1]);
    const ref::Mat<double> whole = ref::sparse_mla_absorbed_rows<double>(q, m.latent_cache(l), sel, dl, ref::model_attn_scale(c));
    const ref::Mat<double> got = Eigen::Map<const ref::Mat<double>>(ol.f.data(), T, H * dl);
    EXPECT_TRUE(same_bits(whole, got)) << "layer " << l << ": attention in pieces of rows differs from one call";
  }
}

// moe_ffn with experts in flight against the experts one after another at 1 thread (the sequential path),
// on uneven loads: expert 0 on every token, expert 1 on about half, experts 2..7 on a few, expert 8 on one
// token, expert 9 on none. F = 200 expert rows, so that one expert's products split by weight rows when it
// runs alone at several threads. Also: on_done ascending, slots within the experts in flight, and the first
// failing expert's exception (in id order) with two failing.
template <class S>
void moe_in_flight_same_bits() {
  ThreadsGuard guard;
  const int64_t T = 203, E = 40, F = 200, NE = 10, K = 3;
  std::vector<ref::Mat<S>> gate, up, down;
  for (int64_t e = 0; e < NE; ++e) {
    gate.push_back(random_mat<S>(F, E, 100 + e));
    up.push_back(random_mat<S>(F, E, 200 + e));
    down.push_back(random_mat<S>(E, F, 300 + e));
  }
  const ref::Mat<S> sg = random_mat<S>(F, E, 400), su = random_mat<S>(F, E, 401), sd = random_mat<S>(E, F, 402);
  const ref::ExpertRef<S> shared{sg, su, sd};
  const ref::Mat<S> x = random_mat<S>(T, E, 403), w = random_mat<S>(T, K, 404);
  ref::MatI ids(T, K);
  std::mt19937 g(405);
  for (int64_t t = 0; t < T; ++t) {
    ids(t, 0) = 0;
    ids(t, 1) = t % 2 ? 1 : 2 + static_cast<int32_t>(g() % 3);        // 1 on half; 2..4 on the rest
    ids(t, 2) = t == 77 ? 8 : 5 + static_cast<int32_t>(g() % 3);      // 5..7; 8 on token 77 only
  }
  struct Out {
    ref::Mat<S> y, eo, so;
  };
  auto run = [&](int64_t in_flight) {
    ref::MoeRun r;
    r.in_flight = in_flight;
    std::vector<int64_t> done;
    r.on_done = [&](int64_t d, int64_t total) {
      done.push_back(d);
      EXPECT_EQ(total, 9);
    };
    const ref::ExpertSlotSource<S> src = [&](int64_t e, int64_t slot) {
      EXPECT_GE(slot, 0);
      EXPECT_LT(slot, std::max<int64_t>(in_flight, 1));
      return ref::ExpertRef<S>{gate[e], up[e], down[e]};
    };
    Out o;
    o.y = ref::moe_ffn<S>(x, ids, w, src, r, &shared, &o.eo, &o.so);
    const std::vector<int64_t> want{1, 2, 3, 4, 5, 6, 7, 8, 9};
    EXPECT_EQ(done, want) << "on_done once per used expert, ascending";
    return o;
  };
  ref::set_threads(1);
  const Out one = run(1);
  // The order is what the bits depend on: the sum of each token's weighted expert outputs (expert_out)
  // in ascending expert id, then the shared expert's, gives moe_ffn's bits; descending ids give others.
  ref::Mat<S> up_sum = ref::Mat<S>::Zero(T, E), down_sum = ref::Mat<S>::Zero(T, E);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < K; ++j) up_sum.row(t) += w(t, j) * one.eo.row(t).segment(j * E, E);
    for (int64_t j = K - 1; j >= 0; --j) down_sum.row(t) += w(t, j) * one.eo.row(t).segment(j * E, E);
  }
  up_sum += one.so;
  down_sum += one.so;
  EXPECT_TRUE(same_bits(one.y, up_sum)) << "moe_ffn sums each token's experts in ascending id";
  EXPECT_FALSE(same_bits(one.y, down_sum)) << "negative control: the data must be sensitive to the order";
  for (int n : kCounts) {
    ref::set_threads(n);
    for (int64_t in_flight : {int64_t{1}, int64_t{2}, int64_t{n}, int64_t{64}}) {
      const Out got = run(in_flight);
      const std::string at = std::to_string(in_flight) + " in flight at " + std::to_string(n) + " threads";
      EXPECT_TRUE(same_bits(one.y, got.y)) << "moe_ffn out, " << at;
      EXPECT_TRUE(same_bits(one.eo, got.eo)) << "expert_out, " << at;
      EXPECT_TRUE(same_bits(one.so, got.so)) << "shared_out, " << at;
    }
    // Experts 3 and 6 fail: expert 3's error comes out, at any count in flight.
    const ref::ExpertSlotSource<S> failing = [&](int64_t e, int64_t) {
      if (e == 3 || e == 6) throw std::runtime_error("expert " + std::to_string(e));
      return ref::ExpertRef<S>{gate[e], up[e], down[e]};
    };
    for (int64_t in_flight : {int64_t{1}, int64_t{n}}) {
      ref::MoeRun r;
      r.in_flight = in_flight;
      try {
        ref::moe_ffn<S>(x, ids, w, failing, r, &shared);
        ADD_FAILURE() << "no exception with failing experts, " << in_flight << " in flight";
      } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "expert 3") << in_flight << " in flight at " << n << " threads";
      }
    }
  }
}

// A whole forward pass at a capture's settings (no expert cache, each layer's weights dropped after use:
// the experts in flight dequantize into one spare each) and with at most 2 experts in flight by the
// memory budget, at 3 and 5 threads, records the bits of the pass at 1 thread.
template <class S>
void forward_in_flight_same_bits() {
  if (!std::filesystem::exists(kOracle)) GTEST_SKIP() << "skipped: shared data absent (" << kOracle << ")";
  ThreadsGuard guard;
  const GgufFile f = GgufFile::open(kModel);
  const ModelConfig c = ModelConfig::from_gguf(f);
  const std::vector<int32_t> ids = ids_of(300);
  ref::ModelOptions capture_like;
  capture_like.expert_cache_bytes = 0;
  capture_like.release_layer_weights = true;
  capture_like.experts_in_flight = 0;  // in flight by the memory budget (the default is one at a time)
  auto run = [&](int n, const ref::ModelOptions& o, Capture& cap) {
    ref::set_threads(n);
    ref::Model<S> m(f, c, o);
    return m.forward(ids, &cap);
  };
  Capture one;
  const ref::Mat<S> logits = run(1, capture_like, one);
  {
    ref::set_threads(1);
    ref::Model<S> probe(f, c);
    int64_t l = 0;
    while (l < c.n_layer_run() && !c.is_moe_layer(l)) ++l;
    ASSERT_LT(l, c.n_layer_run()) << "the model has no MoE layer";
    capture_like.experts_in_flight_bytes = 2 * probe.weights().expert_bytes(l) + 1;  // two fit, not three
  }
  for (int n : {3, 5}) {
    Capture got;
    EXPECT_TRUE(same_bits(logits, run(n, capture_like, got))) << "logits at " << n << " threads";
    expect_same_records(one, got, std::to_string(n) + " threads, 2 experts in flight, no cache");
  }
  ref::ModelOptions wide = capture_like;
  wide.experts_in_flight_bytes = size_t(1) << 40;
  Capture got;
  EXPECT_TRUE(same_bits(logits, run(3, wide, got))) << "logits at 3 threads, every expert in flight";
  expect_same_records(one, got, "3 threads, every expert in flight, no cache");
}

struct Registrar {
  Registrar() {
    register_case("reference", "threads_ops(T=203,threads=1vs2_3_5,dtype=f64)", [] { ops_same_bits<double>(); });
    register_case("reference", "threads_ops(T=203,threads=1vs2_3_5,dtype=f32)", [] { ops_same_bits<float>(); });
    register_case("reference", "threads_forward(model=glm_dsa_tiny,T=300,threads=1vs2_3,dtype=f64)", [] { forward_same_bits<double>(); });
    register_case("reference", "threads_forward(model=glm_dsa_tiny,T=300,threads=1vs2_3,dtype=f32)", [] { forward_same_bits<float>(); });
    register_case("reference", "attention_pieces(model=glm_dsa_tiny,T=300,dtype=f64)", [] { pieces_equal_whole(); });
    register_case("reference", "threads_moe_in_flight(T=203,experts=10,used=9,loads=uneven,threads=1vs2_3_5,dtype=f64)",
                  [] { moe_in_flight_same_bits<double>(); });
    register_case("reference", "threads_moe_in_flight(T=203,experts=10,used=9,loads=uneven,threads=1vs2_3_5,dtype=f32)",
                  [] { moe_in_flight_same_bits<float>(); });
    register_case("reference", "threads_forward_in_flight(model=glm_dsa_tiny,T=300,cache=none,threads=1vs3_5,dtype=f64)",
                  [] { forward_in_flight_same_bits<double>(); });
  }
} registrar;

}  // namespace
}  // namespace mlaconf::test
