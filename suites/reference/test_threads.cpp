// suites/reference: the reference's values do not depend on its thread count (reference/threads.h).
//  - the parallel ops (linear, indexer scores and top-k, absorbed / naive sparse MLA, per-head products)
//    at 2, 3 and 5 threads give the same bits as at 1, on shapes whose row counts are not multiples of
//    the block alignment;
//  - a whole forward pass of the tiny model, past top_k and past one piece of attention rows
//    (T = 300 > 256), records the same bits for every dataset at 1, 2 and 3 threads, f64 and f32;
//  - attention in pieces of rows (model.cpp) gives the bits of one call over all rows.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/model_config.h"
#include "reference/indexer.h"
#include "reference/mla.h"
#include "reference/model.h"
#include "reference/ops.h"
#include "reference/threads.h"
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
    ASSERT_EQ(one.recs.size(), got.recs.size());
    for (const auto& [key, recs] : one.recs) {
      const auto* g = got.get(key.first, key.second);
      ASSERT_NE(g, nullptr) << key.second;
      ASSERT_EQ(recs.size(), g->size()) << key.second;
      for (size_t i = 0; i < recs.size(); ++i) {
        // Bytes, not ==: the top-k gap is NaN on rows with at most top_k keys.
        const auto& a = recs[i].f;
        const auto& b = (*g)[i].f;
        // An integer record has no float data: memcmp of two empty vectors' data() is memcmp(nullptr, ...),
        // undefined behaviour (UBSan: "null pointer passed as argument 1").
        const bool same = recs[i].shape == (*g)[i].shape && recs[i].i == (*g)[i].i && a.size() == b.size() &&
                          (a.empty() || std::memcmp(a.data(), b.data(), sizeof(double) * a.size()) == 0);
        EXPECT_TRUE(same) << "layer " << key.first << " " << key.second << " differs at " << n << " threads";
      }
    }
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

struct Registrar {
  Registrar() {
    register_case("reference", "threads_ops(T=203,threads=1vs2_3_5,dtype=f64)", [] { ops_same_bits<double>(); });
    register_case("reference", "threads_ops(T=203,threads=1vs2_3_5,dtype=f32)", [] { ops_same_bits<float>(); });
    register_case("reference", "threads_forward(model=glm_dsa_tiny,T=300,threads=1vs2_3,dtype=f64)", [] { forward_same_bits<double>(); });
    register_case("reference", "threads_forward(model=glm_dsa_tiny,T=300,threads=1vs2_3,dtype=f32)", [] { forward_same_bits<float>(); });
    register_case("reference", "attention_pieces(model=glm_dsa_tiny,T=300,dtype=f64)", [] { pieces_equal_whole(); });
  }
} registrar;

}  // namespace
}  // namespace mlaconf::test
