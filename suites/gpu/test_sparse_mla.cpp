// suites/gpu: sparse MLA (absorbed form) against a float64 host reference of the same math.
//
// Inputs are f16 values, so the reference sees exactly what the kernel sees; the difference measured
// is the kernel's fp32 accumulation and split-K merge. Tolerances: NMSE <= 1e-5 and cosine >= 0.9999
// (docs/TOLERANCES.md for attention outputs).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <tuple>

#include "optimized/api.h"
#include "core/error.h"
#include "optimized/faults.h"
#include "suites/gpu/gpu_test_util.h"

namespace mlaconf::gputest {
namespace {

constexpr double kNmseTol = 1e-5;
constexpr double kCosTol = 0.9999;

struct MlaCase {
  int64_t T = 1, H = 64, dqk = 576, dv = 512, topk = 2048, L = 4096;
  double invalid_frac = 0.0;  // share of index slots set to -1
  bool all_invalid = false;
  uint64_t seed = 1;
  int hpc = 0;        // heads per CTA of the tensor-core kernel (0 = automatic)
  int64_t split = 0;  // split-K chunk (0 = automatic)
};

std::string mla_name(const char* kind, const MlaCase& c) {
  std::string s = std::string(kind) + "(";
  if (c.T != 1) s += "t=" + std::to_string(c.T) + ",";
  s += "h=" + std::to_string(c.H) + ",d=" + std::to_string(c.dqk) + ",dv=" + std::to_string(c.dv) + ",topk=" +
       std::to_string(c.topk) + ",L=" + std::to_string(c.L);
  if (c.all_invalid) s += ",idx=all_invalid";
  else if (c.invalid_frac > 0) s += ",invalid=" + std::to_string((int)std::lround(c.invalid_frac * 100)) + "pct";
  if (c.hpc) s += ",hpc=" + std::to_string(c.hpc);
  if (c.split) s += ",split=" + std::to_string(c.split);
  return s + ",dtype=f16)";
}

// Index lists: min(topk, L) distinct random rows per query, the rest -1; some slots knocked out.
std::vector<int32_t> make_indices(const MlaCase& c, std::mt19937_64& rng) {
  std::vector<int32_t> idx(c.T * c.topk, -1);
  if (c.all_invalid || c.L == 0) return idx;
  std::vector<int32_t> all(c.L);
  std::iota(all.begin(), all.end(), 0);
  for (int64_t t = 0; t < c.T; ++t) {
    const int64_t n = std::min(c.topk, c.L);
    for (int64_t i = 0; i < n; ++i) std::swap(all[i], all[i + rng() % (c.L - i)]);  // partial shuffle
    for (int64_t i = 0; i < n; ++i) idx[t * c.topk + i] = all[i];
    std::shuffle(idx.begin() + t * c.topk, idx.begin() + (t + 1) * c.topk, rng);
  }
  std::uniform_real_distribution<double> u(0, 1);
  for (auto& v : idx)
    if (u(rng) < c.invalid_frac) v = -1;
  return idx;
}

// out [T, H, dv] in double. cache_row(r) gives row r's dqk values.
template <class RowFn>
std::vector<double> reference(const MlaCase& c, const std::vector<float>& q, const std::vector<int32_t>& idx,
                              float scale, RowFn cache_row) {
  std::vector<double> out(c.T * c.H * c.dv, 0.0);
  std::vector<double> s;
  for (int64_t t = 0; t < c.T; ++t) {
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < c.topk; ++i)
      if (idx[t * c.topk + i] >= 0) rows.push_back(idx[t * c.topk + i]);
    if (rows.empty()) continue;
    std::vector<std::vector<float>> K;
    for (auto r : rows) K.push_back(cache_row(r));
    for (int64_t h = 0; h < c.H; ++h) {
      const float* qh = &q[(t * c.H + h) * c.dqk];
      s.assign(rows.size(), 0.0);
      double mx = -INFINITY;
      for (size_t j = 0; j < rows.size(); ++j) {
        double d = 0;
        for (int64_t x = 0; x < c.dqk; ++x) d += (double)qh[x] * K[j][x];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double den = 0;
      for (auto& v : s) den += (v = std::exp(v - mx));
      double* o = &out[(t * c.H + h) * c.dv];
      for (size_t j = 0; j < rows.size(); ++j)
        for (int64_t x = 0; x < c.dv; ++x) o[x] += s[j] / den * K[j][x];
    }
  }
  return out;
}

struct MlaResult {
  std::vector<float> got;
  std::vector<double> want;
  double ms = 0;
};

MlaResult run_case(const MlaCase& c, const std::vector<int32_t>* idx_override = nullptr) {
  std::mt19937_64 rng(c.seed);
  std::vector<uint16_t> qb, kb;
  std::vector<float> q, k;
  random_half(rng, c.T * c.H * c.dqk, 1.0f, &qb, &q);
  random_half(rng, c.L * c.dqk, 1.0f, &kb, &k);
  auto idx = idx_override ? *idx_override : make_indices(c, rng);
  std::vector<int32_t> pos(c.T);
  for (int64_t t = 0; t < c.T; ++t) pos[t] = (int32_t)(c.L - c.T + t);
  const float scale = 1.0f / std::sqrt(256.0f);
  auto d_q = cuda::to_device(qb);
  auto d_k = cuda::to_device(kb);
  auto d_idx = cuda::to_device(idx);
  auto d_pos = cuda::to_device(pos);
  cuda::DeviceBuffer d_out(c.T * c.H * c.dv * 4);
  cuda::SparseMlaArgs a;
  a.q = d_q.as<uint16_t>();
  a.cache = c.L ? d_k.as<uint16_t>() : nullptr;
  a.L = c.L;
  a.idx = d_idx.as<int32_t>();
  a.q_pos = d_pos.as<int32_t>();
  a.T = c.T, a.H = c.H, a.d_qk = c.dqk, a.d_v = c.dv, a.top_k = c.topk;
  a.scale = scale;
  a.out = d_out.as<float>();
  a.heads_per_cta = c.hpc;
  a.split = c.split;
  cuda::sparse_mla(a);  // warm-up (and the result)
  cuda::synchronize();
  auto t0 = std::chrono::steady_clock::now();
  const int reps = 5;
  for (int i = 0; i < reps; ++i) cuda::sparse_mla(a);
  cuda::synchronize();
  MlaResult r;
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  r.got = cuda::to_host<float>(d_out, c.T * c.H * c.dv);
  r.want = reference(c, q, idx, scale, [&](int64_t row) {
    return std::vector<float>(k.begin() + row * c.dqk, k.begin() + (row + 1) * c.dqk);
  });
  return r;
}

void check_conformance(const MlaResult& r, const std::string& what) {
  ASSERT_TRUE(all_finite(r.got)) << what << ": non-finite output";
  const double e = nmse(r.got, r.want), cs = cosine(r.got, r.want);
  testing::Test::RecordProperty("nmse", std::to_string(e));
  testing::Test::RecordProperty("cosine", std::to_string(cs));
  testing::Test::RecordProperty("ms", std::to_string(r.ms));
  std::printf("  %s: NMSE %.3e, cosine %.9f, %.3f ms/call\n", what.c_str(), e, cs, r.ms);
  EXPECT_LE(e, kNmseTol) << what;
  EXPECT_GE(cs, kCosTol) << what;
}

void conformance_case(MlaCase c, const char* kind) {
  MLACONF_REQUIRE_CUDA();
  auto r = run_case(c);
  if (c.all_invalid || c.L == 0) {
    for (float v : r.got) ASSERT_EQ(v, 0.0f) << "a query with no valid token must give zeros";
    return;
  }
  check_conformance(r, mla_name(kind, c));
}

// Batched decode as a server runs it: B queries of B sequences, each sequence's rows on pages of 64
// rows scattered over one shared cache (a page table per sequence), index lists of absolute rows
// (positions chosen from the sequence's own context, 10% -1). Judged against the float64 reference
// over the same rows; every configuration of the tensor-core kernel (16 or 64 heads per CTA, split
// or not) must give the same answer.
void batched_paged_case(int64_t B, int hpc, int64_t split) {
  MLACONF_REQUIRE_CUDA();
  constexpr int64_t kPage = 64;
  const int64_t ctx = 3000, pages_per_seq = (ctx + kPage - 1) / kPage, n_pages = B * pages_per_seq + 7;
  MlaCase c;
  c.T = B, c.H = 64, c.topk = 2048, c.L = n_pages * kPage, c.hpc = hpc, c.split = split, c.seed = 40 + B;
  std::mt19937_64 rng(77 + B);
  std::vector<int32_t> pages(n_pages);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);  // page j of sequence b is pages[b * pages_per_seq + j]
  std::vector<int32_t> idx(B * c.topk, -1), pos(ctx);
  for (int64_t b = 0; b < B; ++b) {
    std::iota(pos.begin(), pos.end(), 0);
    std::shuffle(pos.begin(), pos.end(), rng);
    for (int64_t i = 0; i < c.topk; ++i) {
      if (rng() % 10 == 0) continue;
      const int64_t p = pos[i];
      idx[b * c.topk + i] = (int32_t)(pages[b * pages_per_seq + p / kPage] * kPage + p % kPage);
    }
  }
  auto r = run_case(c, &idx);
  check_conformance(r, mla_name("sparse_mla_batched_paged", c));
}

// The cache holds more than 2^31 elements: rows above 2^31 / d are selected, read with 64-bit offsets.
void huge_cache_case() {
  MLACONF_REQUIRE_CUDA();
  MlaCase c;
  c.H = 64, c.topk = 2048, c.L = 3'800'000;
  const int64_t elems = c.L * c.dqk;
  ASSERT_GT(elems, (int64_t)1 << 31);
  cuda::DeviceBuffer d_k((size_t)elems * 2);
  const uint64_t seed = 99;
  cuda::fill_pattern_f16(d_k.as<uint16_t>(), c.L, c.dqk, seed);
  std::mt19937_64 rng(5);
  std::vector<uint16_t> qb;
  std::vector<float> q;
  random_half(rng, c.H * c.dqk, 1.0f, &qb, &q);
  // Half the rows past the 2^31-element mark, the rest spread over the cache, the last row included.
  const int64_t first_high = (((int64_t)1 << 31) + c.dqk - 1) / c.dqk;
  std::vector<int32_t> idx(c.topk);
  for (int64_t i = 0; i < c.topk; ++i)
    idx[i] = (int32_t)(i % 2 ? first_high + (int64_t)(rng() % (c.L - first_high)) : (int64_t)(rng() % c.L));
  idx[0] = (int32_t)(c.L - 1);
  idx[1] = (int32_t)first_high;
  auto d_q = cuda::to_device(qb);
  auto d_idx = cuda::to_device(idx);
  cuda::DeviceBuffer d_out(c.H * c.dv * 4);
  cuda::SparseMlaArgs a;
  a.q = d_q.as<uint16_t>(), a.cache = d_k.as<uint16_t>(), a.L = c.L, a.idx = d_idx.as<int32_t>();
  a.T = 1, a.H = c.H, a.d_qk = c.dqk, a.d_v = c.dv, a.top_k = c.topk, a.scale = 1.0f / 16, a.out = d_out.as<float>();
  cuda::sparse_mla(a);
  cuda::synchronize();
  MlaResult r;
  r.got = cuda::to_host<float>(d_out, c.H * c.dv);
  r.want = reference(c, q, idx, a.scale, [&](int64_t row) {
    std::vector<float> v(c.dqk);
    for (int64_t x = 0; x < c.dqk; ++x) v[x] = cuda::half_bits_to_float_host(cuda::pattern_half_bits(seed, row, x));
    return v;
  });
  // Spot check the fill itself: the device holds the pattern at the last row.
  std::vector<uint16_t> last(c.dqk);
  d_k.download(last.data(), c.dqk * 2, (size_t)(c.L - 1) * c.dqk * 2);
  for (int64_t x = 0; x < c.dqk; ++x) ASSERT_EQ(last[x], cuda::pattern_half_bits(seed, c.L - 1, x));
  check_conformance(r, "huge cache");
}

// Negative control: dense attention in place of sparse fails the check once the context is longer than
// top_k, and passes when it is shorter (then the index list holds every row: sparse == dense).
void dense_control_case(bool longer) {
  MLACONF_REQUIRE_CUDA();
  MlaCase c;
  c.H = 64, c.topk = 2048, c.L = longer ? 4096 : 1024;
  cuda::ScopedFault f(cuda::Fault::DenseAttention);
  auto r = run_case(c);
  const double e = nmse(r.got, r.want);
  std::printf("  dense attention, L=%lld, top_k=%lld: NMSE %.3e vs sparse reference\n", (long long)c.L, (long long)c.topk, e);
  if (longer)
    EXPECT_GT(e, kNmseTol) << "dense attention on a context longer than top_k must fail the sparse check";
  else
    EXPECT_LE(e, kNmseTol) << "dense attention on a context shorter than top_k equals sparse";
}

// Negative control: a split-K merge that ignores the per-split maxima must be caught.
void merge_control_case() {
  MLACONF_REQUIRE_CUDA();
  MlaCase c;
  c.H = 16, c.topk = 2048, c.L = 4096;
  cuda::ScopedFault f(cuda::Fault::NoLseMerge);
  auto r = run_case(c);
  const double e = nmse(r.got, r.want);
  std::printf("  merge without log-sum-exp rescale: NMSE %.3e\n", e);
  EXPECT_GT(e, kNmseTol);
}

void bad_input_case() {
  MLACONF_REQUIRE_CUDA();
  cuda::SparseMlaArgs a;
  a.T = 1, a.H = 4, a.d_qk = 2000, a.d_v = 512, a.top_k = 8, a.L = 8;
  EXPECT_THROW(cuda::sparse_mla(a), InputError);
  a.d_qk = 576, a.d_v = 513;
  EXPECT_THROW(cuda::sparse_mla(a), InputError);
}

const bool registered = [] {
  for (int64_t L : {4096, 32768}) {
    MlaCase c;
    c.L = L;
    register_case("sparse_mla", mla_name("sparse_mla_decode", c), [c] { conformance_case(c, "sparse_mla_decode"); });
  }
  {
    MlaCase c;
    c.T = 8, c.L = 4096;
    register_case("sparse_mla", mla_name("sparse_mla_prefill", c), [c] { conformance_case(c, "sparse_mla_prefill"); });
  }
  {  // corners
    MlaCase c;
    c.H = 64, c.topk = 2048, c.L = 4096, c.invalid_frac = 0.3;
    register_case("sparse_mla", mla_name("sparse_mla_decode", c), [c] { conformance_case(c, "sparse_mla_decode"); });
    MlaCase z = c;
    z.all_invalid = true, z.invalid_frac = 0;
    register_case("sparse_mla", mla_name("sparse_mla_decode", z), [z] { conformance_case(z, "sparse_mla_decode"); });
    MlaCase e;
    e.H = 4, e.topk = 64, e.L = 0;
    register_case("sparse_mla", mla_name("sparse_mla_decode", e), [e] { conformance_case(e, "sparse_mla_decode"); });
    MlaCase s;
    s.H = 8, s.topk = 64, s.L = 40;  // top_k > L
    register_case("sparse_mla", mla_name("sparse_mla_decode", s), [s] { conformance_case(s, "sparse_mla_decode"); });
    MlaCase o;
    o.T = 3, o.H = 5, o.topk = 37, o.L = 1001, o.invalid_frac = 0.1;  // just off alignment
    register_case("sparse_mla", mla_name("sparse_mla_prefill", o), [o] { conformance_case(o, "sparse_mla_prefill"); });
    MlaCase d;
    d.T = 2, d.H = 17, d.dqk = 98, d.dv = 64, d.topk = 33, d.L = 70;  // other latent dims
    register_case("sparse_mla", mla_name("sparse_mla_prefill", d), [d] { conformance_case(d, "sparse_mla_prefill"); });
  }
  for (auto [B, hpc, split] : {std::tuple<int64_t, int, int64_t>{8, 0, 0}, {8, 16, 0}, {8, 64, 0}, {8, 64, 4096}, {8, 64, 512},
                                {3, 16, 48}, {64, 0, 0}}) {
    std::string name = "sparse_mla_batched_paged(b=" + std::to_string(B) + ",h=64,d=576,dv=512,topk=2048,ctx=3000,page=64";
    if (hpc) name += ",hpc=" + std::to_string(hpc);
    if (split) name += ",split=" + std::to_string(split);
    register_case("sparse_mla", name + ",dtype=f16)", [B, hpc, split] { batched_paged_case(B, hpc, split); });
  }
  register_case("sparse_mla", "sparse_mla_decode(h=64,d=576,dv=512,topk=2048,L=3800000,cache=gt2^31elems,dtype=f16)",
                huge_cache_case);
  register_case("sparse_mla", "sparse_mla_negative_control(fault=dense_attention,h=64,topk=2048,L=4096)",
                [] { dense_control_case(true); });
  register_case("sparse_mla", "sparse_mla_negative_control(fault=dense_attention,h=64,topk=2048,L=1024)",
                [] { dense_control_case(false); });
  register_case("sparse_mla", "sparse_mla_negative_control(fault=no_lse_merge,h=16,topk=2048,L=4096)", merge_control_case);
  register_case("sparse_mla", "sparse_mla_bad_input(d=2000|dv=513)", bad_input_case);
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
