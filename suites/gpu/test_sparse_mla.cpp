// suites/gpu: sparse MLA (absorbed form) against ref::sparse_mla_absorbed, the reference's own function,
// judged by the fixtures judge (op_check.h): activation class at f16 for the tensor-core kernel (d 576,
// dv 512: P is rounded to fp16 for the PV mma), at f32 for the SIMT kernel (fp32 throughout). Inputs are
// f16 values, so the reference sees exactly what the kernel sees. The reference takes each query's listed
// rows gathered into a small cache (the attention of a query depends on its listed rows only), so a
// multi-GB cache needs no host copy.
//
// Tiles: the tensor-core kernels take 16 or 32 heads of one query per CTA (sparse_mla_rows, the default: 32 from
// plans of 8 queries, else 16; 32 listed rows per tile, 8 per warp of a head group), split-K chunks of a
// multiple of 16 (up to 4 merged by the last CTA, more by a merge kernel); the SIMT kernel 16 heads and
// 32 rows per step. Off-alignment cases run heads, top_k, L, T and splits just below and above those
// multiples, plus primes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/faults.h"
#include "reference/mla.h"
#include "suites/gpu/gpu_test_util.h"
#include "suites/gpu/host_ref.h"
#include "suites/gpu/op_check.h"

namespace mlaconf::gputest {
namespace {

using test::CaseName;

struct MlaCase {
  int64_t T = 1, H = 64, dqk = 576, dv = 512, topk = 2048, L = 4096;
  double invalid_frac = 0.0;  // share of index slots set to -1
  bool all_invalid = false;
  uint64_t seed = 1;
  int hpc = 0;        // heads per CTA of the tensor-core kernel (0 = automatic)
  int64_t split = 0;  // split-K chunk (0 = automatic)
};

bool tensor_core(const MlaCase& c) { return c.dqk == 576 && c.dv == 512; }

std::string mla_name(const char* kind, const MlaCase& c) {
  CaseName n(kind);
  if (c.T != 1) n.p("t", c.T);
  n.p("h", c.H).p("d", c.dqk).p("dv", c.dv).p("topk", c.topk).p("L", c.L);
  if (c.all_invalid) n.p("idx", "all_invalid");
  else if (c.invalid_frac > 0) n.p("invalid", std::to_string((int)std::lround(c.invalid_frac * 100)) + "pct");
  if (c.hpc) n.p("hpc", c.hpc);
  if (c.split) n.p("split", c.split);
  return n.p("dtype", "f16");
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

// Expected out [T, H, dv]: ref::sparse_mla_absorbed per query on its listed rows (row_fn(r, dst) writes
// cache row r's dqk values), gathered in list order with the list renumbered (-1 stays -1).
template <class RowFn>
std::vector<double> expected_out(const MlaCase& c, const std::vector<uint16_t>& qb, const std::vector<int32_t>& idx, float scale,
                                 RowFn row_fn) {
  std::vector<double> out;
  out.reserve(c.T * c.H * c.dv);
  for (int64_t t = 0; t < c.T; ++t) {
    std::vector<int32_t> local(c.topk, -1);
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < c.topk; ++i) {
      const int32_t r = idx[t * c.topk + i];
      if (r >= 0 && r < c.L) local[i] = (int32_t)rows.size(), rows.push_back(r);
    }
    MatD cache(rows.size(), c.dqk);
    for (size_t j = 0; j < rows.size(); ++j) row_fn(rows[j], cache.row(j).data());
    const MatD o = ref::sparse_mla_absorbed<double>(mat_of_half(qb, c.H, c.dqk, t * c.H * c.dqk), cache, local.data(), c.topk, c.dv,
                                                    (double)scale);
    out.insert(out.end(), o.data(), o.data() + o.size());
  }
  return out;
}

// A case's inputs (random f16 q and cache from c.seed, the case's index lists or the given ones) on the host and the
// device, and the kernel's arguments for them (heads per CTA and split as the case says; out: d_out).
struct MlaInputs {
  std::vector<uint16_t> qb, kb;
  std::vector<float> q, k;
  std::vector<int32_t> idx;
  cuda::DeviceBuffer d_q, d_k, d_idx, d_pos, d_out;
  cuda::SparseMlaArgs a;
};
MlaInputs mla_inputs(const MlaCase& c, const std::vector<int32_t>* idx_override = nullptr) {
  MlaInputs in;
  std::mt19937_64 rng(c.seed);
  random_half(rng, c.T * c.H * c.dqk, 1.0f, &in.qb, &in.q);
  random_half(rng, c.L * c.dqk, 1.0f, &in.kb, &in.k);
  in.idx = idx_override ? *idx_override : make_indices(c, rng);
  std::vector<int32_t> pos(c.T);
  for (int64_t t = 0; t < c.T; ++t) pos[t] = (int32_t)(c.L - c.T + t);
  in.d_q = cuda::to_device(in.qb), in.d_k = cuda::to_device(in.kb), in.d_idx = cuda::to_device(in.idx), in.d_pos = cuda::to_device(pos);
  in.d_out = cuda::DeviceBuffer(c.T * c.H * c.dv * 4);
  cuda::SparseMlaArgs& a = in.a;
  a.q = in.d_q.as<uint16_t>();
  a.cache = c.L ? in.d_k.as<uint16_t>() : nullptr;
  a.L = c.L;
  a.idx = in.d_idx.as<int32_t>();
  a.q_pos = in.d_pos.as<int32_t>();
  a.T = c.T, a.H = c.H, a.d_qk = c.dqk, a.d_v = c.dv, a.top_k = c.topk;
  a.scale = 1.0f / std::sqrt(256.0f);
  a.out = in.d_out.as<float>();
  a.heads_per_cta = c.hpc;
  a.split = c.split;
  return in;
}

// Runs the kernel on a case (random f16 q and cache, or the given index lists) and judges it.
OpCheck mla_check(const MlaCase& c, const std::vector<int32_t>* idx_override = nullptr, const std::string& dir = "") {
  MlaInputs in = mla_inputs(c, idx_override);
  const cuda::SparseMlaArgs& a = in.a;
  const auto& qb = in.qb;
  const auto& idx = in.idx;
  const auto& k = in.k;
  const float scale = a.scale;
  cuda::sparse_mla(a);
  cuda::synchronize();
  auto t0 = std::chrono::steady_clock::now();
  const int reps = 3;
  for (int i = 0; i < reps; ++i) cuda::sparse_mla(a);
  cuda::synchronize();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  const auto got = cuda::to_host<float>(in.d_out, c.T * c.H * c.dv);
  const auto want = expected_out(c, qb, idx, scale, [&](int64_t r, double* dst) {
    for (int64_t x = 0; x < c.dqk; ++x) dst[x] = k[r * c.dqk + x];
  });
  OpCheck chk(dir);
  const auto kb_kept = std::make_shared<const std::vector<uint16_t>>(std::move(in.kb));  // the check outlives this scope
  chk.input("q", [qb, c] { return f16_array({c.T, c.H, c.dqk}, qb); });
  chk.input("cache", [kb_kept, c] { return f16_array({c.L, c.dqk}, *kb_kept); });
  chk.input("idx", [idx, c] { return i32_array({c.T, c.topk}, idx); });
  chk.input("scale", [scale] { return f32_array({1}, {scale}); });
  chk.tensor("out", tensor_core(c) ? "f16" : "f32", {c.T, c.H, c.dv}, want, as_f64(got));
  std::printf("  %.3f ms/call\n", ms);
  return chk;
}

void conformance_case(MlaCase c) {
  MLACONF_REQUIRE_CUDA();
  OpCheck chk = mla_check(c);
  expect_pass(chk);
}

// Batched decode as a server runs it: B queries of B sequences, each sequence's rows on pages of 64
// rows scattered over one shared cache (a page table per sequence), index lists of absolute rows
// (positions chosen from the sequence's own context, 10% -1). Every configuration of the tensor-core
// kernel (16 or 32 heads per CTA, split or not) must give the reference's answer.
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
  OpCheck chk = mla_check(c, &idx);
  expect_pass(chk);
}

// The cache holds more than 2^31 elements (filled on the device with pattern_half_bits): half of the
// listed rows lie past the 2^31-element mark (the last row and the first row past it included), read
// with 64-bit offsets. kind: "decode" (T 1, automatic heads per CTA), "prefill" (T 4, 32 heads per CTA),
// "simt" (the cache pointer 4 bytes off 16-byte alignment: the SIMT kernel).
void huge_cache_case(const std::string& kind) {
  MLACONF_REQUIRE_CUDA();
  MlaCase c;
  c.T = kind == "prefill" ? 4 : 1;
  c.hpc = kind == "prefill" ? 32 : 0;
  c.H = 64, c.topk = 2048, c.L = 3'800'000;
  // simt: 4 bytes off (the SIMT kernel's 4-byte loads stay aligned; the tensor-core kernel needs 16).
  const int64_t elems = c.L * c.dqk, offset = kind == "simt" ? 2 : 0;
  ASSERT_GT(elems, (int64_t)1 << 31);
  cuda::DeviceBuffer d_k((size_t)(elems + offset) * 2);
  const uint64_t seed = 99;
  uint16_t* cache = d_k.as<uint16_t>() + offset;
  cuda::fill_pattern_f16(cache, c.L, c.dqk, seed);
  std::mt19937_64 rng(5);
  std::vector<uint16_t> qb;
  std::vector<float> q;
  random_half(rng, c.T * c.H * c.dqk, 1.0f, &qb, &q);
  const int64_t first_high = (((int64_t)1 << 31) + c.dqk - 1) / c.dqk;
  std::vector<int32_t> idx(c.T * c.topk);
  for (int64_t t = 0; t < c.T; ++t) {
    for (int64_t i = 0; i < c.topk; ++i)
      idx[t * c.topk + i] = (int32_t)(i % 2 ? first_high + (int64_t)(rng() % (c.L - first_high)) : (int64_t)(rng() % c.L));
    idx[t * c.topk] = (int32_t)(c.L - 1);
    idx[t * c.topk + 1] = (int32_t)first_high;
  }
  auto d_q = cuda::to_device(qb);
  auto d_idx = cuda::to_device(idx);
  cuda::DeviceBuffer d_out(c.T * c.H * c.dv * 4);
  cuda::SparseMlaArgs a;
  a.q = d_q.as<uint16_t>(), a.cache = cache, a.L = c.L, a.idx = d_idx.as<int32_t>();
  a.T = c.T, a.H = c.H, a.d_qk = c.dqk, a.d_v = c.dv, a.top_k = c.topk, a.scale = 1.0f / 16, a.out = d_out.as<float>();
  a.heads_per_cta = c.hpc;
  cuda::sparse_mla(a);
  cuda::synchronize();
  // The device holds the pattern at the last row (the fill itself reached it).
  std::vector<uint16_t> last(c.dqk);
  d_k.download(last.data(), c.dqk * 2, (size_t)((c.L - 1) * c.dqk + offset) * 2);
  for (int64_t x = 0; x < c.dqk; ++x) ASSERT_EQ(last[x], cuda::pattern_half_bits(seed, c.L - 1, x));
  const auto want = expected_out(c, qb, idx, a.scale, [&](int64_t r, double* dst) {
    for (int64_t x = 0; x < c.dqk; ++x) dst[x] = cuda::half_bits_to_float_host(cuda::pattern_half_bits(seed, r, x));
  });
  OpCheck chk;
  chk.input("q", [&] { return f16_array({c.T, c.H, c.dqk}, qb); });
  chk.input("idx", [&] { return i32_array({c.T, c.topk}, idx); });
  chk.input("cache_pattern_seed", [&] { return i32_array({1}, {(int32_t)seed}); });
  chk.tensor("out", kind == "simt" ? "f32" : "f16", {c.T, c.H, c.dv}, want,
             as_f64(cuda::to_host<float>(d_out, c.T * c.H * c.dv)));
  expect_pass(chk);
}

// 32 heads per CTA gives the bits of 16 at the same split: a head group's 4 warps run the 16-head CTA's
// code on the same rows in the same order, so a rule may pick either by batch without a query's bits
// depending on its batch. Judged by memcmp, at each merge path (none, by the last CTA, the merge kernel),
// heads off both CTA sizes, 30 % of the slots -1.
void rows32_bits_case(int64_t T, int64_t H, int64_t split) {
  MLACONF_REQUIRE_CUDA();
  MlaCase c;
  c.T = T, c.H = H, c.topk = 2048, c.L = 4099, c.invalid_frac = 0.3, c.seed = 700 + H + split, c.split = split;
  MlaInputs in = mla_inputs(c);
  std::vector<float> out[2];
  for (int v = 0; v < 2; ++v) {
    in.d_out.fill(0xFF);
    in.a.heads_per_cta = v ? 32 : 16;
    cuda::sparse_mla(in.a);
    out[v] = cuda::to_host<float>(in.d_out, c.T * c.H * c.dv);
  }
  ASSERT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * 4), 0) << "32 heads per CTA changed bits";
}

// Negative control: dense attention in place of sparse fails the check once the context is longer than
// top_k, and passes when it is shorter (then the index list holds every row: sparse == dense).
void dense_control_case(bool longer) {
  MLACONF_REQUIRE_CUDA();
  MlaCase c;
  c.H = 64, c.topk = 2048, c.L = longer ? 4096 : 1024;
  cuda::ScopedFault f(cuda::Fault::DenseAttention);
  OpCheck chk = mla_check(c, nullptr, testing::TempDir() + "/mlaconf_repro_dense");
  std::printf("%s", chk.summary().c_str());
  if (longer)
    EXPECT_FALSE(chk.pass()) << "dense attention on a context longer than top_k must fail the sparse check";
  else
    EXPECT_TRUE(chk.pass()) << "dense attention on a context shorter than top_k equals sparse";
}

// Negative control: a split-K merge that ignores the per-split maxima must be caught.
void merge_control_case() {
  MLACONF_REQUIRE_CUDA();
  MlaCase c;
  c.H = 16, c.topk = 2048, c.L = 4096;
  cuda::ScopedFault f(cuda::Fault::NoLseMerge);
  OpCheck chk = mla_check(c, nullptr, testing::TempDir() + "/mlaconf_repro_merge");
  std::printf("%s", chk.summary().c_str());
  EXPECT_FALSE(chk.pass()) << "a merge without the log-sum-exp rescale must be caught";
}

void bad_input_case() {
  MLACONF_REQUIRE_CUDA();
  cuda::SparseMlaArgs a;
  a.T = 1, a.H = 4, a.d_qk = 2000, a.d_v = 512, a.top_k = 8, a.L = 8;
  EXPECT_THROW(cuda::sparse_mla(a), NotSupported);  // head sizes the kernel does not do: exit 3, not 2
  a.d_qk = 576, a.d_v = 513;
  EXPECT_THROW(cuda::sparse_mla(a), NotSupported);
  a.d_v = 512, a.H = 0;
  EXPECT_THROW(cuda::sparse_mla(a), InputError);  // a zero dimension is bad input
}

const bool registered = [] {
  const auto reg = [](const char* kind, const MlaCase& c) { register_case("sparse_mla", mla_name(kind, c), [c] { conformance_case(c); }); };
  for (int64_t L : {4096, 32768}) {
    MlaCase c;
    c.L = L;
    reg("sparse_mla_decode", c);
  }
  {
    MlaCase c;
    c.T = 8, c.L = 4096;
    reg("sparse_mla_prefill", c);
  }
  {  // corners
    MlaCase c;
    c.invalid_frac = 0.3;
    reg("sparse_mla_decode", c);
    MlaCase z;
    z.all_invalid = true;
    reg("sparse_mla_decode", z);
    MlaCase e;
    e.H = 4, e.topk = 64, e.L = 0;
    reg("sparse_mla_decode", e);
    MlaCase s;
    s.H = 8, s.topk = 64, s.L = 40;  // top_k > L
    reg("sparse_mla_decode", s);
    MlaCase o;
    o.T = 3, o.H = 5, o.topk = 37, o.L = 1001, o.invalid_frac = 0.1;
    reg("sparse_mla_prefill", o);
    MlaCase d;
    d.T = 2, d.H = 17, d.dqk = 98, d.dv = 64, d.topk = 33, d.L = 70;  // other latent dims
    reg("sparse_mla_prefill", d);
  }
  // Off alignment, tensor-core kernel: heads around its 16 / 32 per CTA (each CTA size forced), top_k
  // around their 16- and 32-row tiles up to 16 x 16, L around top_k and tiles, T around a wave of CTAs,
  // split chunks around 16-row multiples (partial 32-row tiles) and the fused merge, for both CTA sizes.
  for (int64_t H : {1, 15, 17, 31, 33, 63, 65, 127})
    for (int hpc : {16, 32}) {
      MlaCase c;
      c.H = H, c.topk = 257, c.L = 1031, c.hpc = hpc, c.seed = 100 + H;
      reg("sparse_mla_decode", c);
    }
  for (int64_t topk : {1, 15, 17, 31, 33, 63, 65, 127, 129, 255, 257, 2039}) {
    MlaCase c;
    c.topk = topk, c.L = 4099, c.seed = 200 + topk;
    reg("sparse_mla_decode", c);
  }
  for (int64_t L : {1, 15, 17, 2047, 2049}) {
    MlaCase c;
    c.L = L, c.seed = 300 + L;
    reg("sparse_mla_decode", c);
  }
  for (int64_t T : {7, 9, 31, 33}) {
    MlaCase c;
    c.T = T, c.topk = 129, c.L = 4099, c.seed = 400 + T;
    reg("sparse_mla_prefill", c);
  }
  for (int hpc : {16, 32})
    for (int64_t split : {15, 17, 47, 49, 500, 520}) {
      MlaCase c;
      c.H = 64, c.topk = 2048, c.L = 4099, c.split = split, c.hpc = hpc, c.seed = 500 + split;
      reg("sparse_mla_decode", c);
    }
  // Off alignment, SIMT kernel: heads around 16, top_k and L around its 32-row steps, d around even sizes.
  for (auto [T, H, dqk, dv, topk, L] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>{1, 15, 98, 64, 31, 97},
                                         {2, 17, 130, 128, 33, 1009}, {1, 16, 258, 256, 63, 65}, {3, 33, 576, 510, 65, 4099},
                                         {1, 1, 2, 2, 1, 1}})
  {
    MlaCase c;
    c.T = T, c.H = H, c.dqk = dqk, c.dv = dv, c.topk = topk, c.L = L, c.seed = 600 + dqk;
    reg(T == 1 ? "sparse_mla_decode" : "sparse_mla_prefill", c);
  }
  for (auto [B, hpc, split] : {std::tuple<int64_t, int, int64_t>{8, 0, 0}, {8, 16, 0}, {8, 32, 4096}, {8, 32, 512},
                                {3, 16, 48}, {64, 0, 0}, {8, 32, 0}, {3, 32, 48}, {64, 32, 0}}) {
    CaseName n("sparse_mla_batched_paged");
    n.p("b", B).p("h", 64).p("d", 576).p("dv", 512).p("topk", 2048).p("ctx", 3000).p("page", 64);
    if (hpc) n.p("hpc", hpc);
    if (split) n.p("split", split);
    register_case("sparse_mla", n.p("dtype", "f16"), [B = B, hpc = hpc, split = split] { batched_paged_case(B, hpc, split); });
  }
  for (auto [T, H, split] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 128}, {2, 64, 512}, {3, 33, 2048}, {1, 17, 96}, {5, 64, 48}}) {
    CaseName n("sparse_mla_rows32_bits");
    n.p("t", T).p("h", H).p("d", 576).p("dv", 512).p("topk", 2048).p("L", 4099).p("split", split);
    register_case("sparse_mla", n.p("dtype", "f16"), [T = T, H = H, split = split] { rows32_bits_case(T, H, split); });
  }
  // A cache over 2^31 elements through three kernels' paths (independent cases of one invariant).
  register_case("sparse_mla", "sparse_mla_decode(h=64,d=576,dv=512,topk=2048,L=3800000,cache=gt2^31elems,dtype=f16)",
                [] { huge_cache_case("decode"); });
  register_case("sparse_mla", "sparse_mla_prefill(t=4,h=64,d=576,dv=512,topk=2048,L=3800000,hpc=32,cache=gt2^31elems,dtype=f16)",
                [] { huge_cache_case("prefill"); });
  register_case("sparse_mla", "sparse_mla_decode(h=64,d=576,dv=512,topk=2048,L=3800000,cache=gt2^31elems_unaligned,kernel=simt,dtype=f16)",
                [] { huge_cache_case("simt"); });
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
