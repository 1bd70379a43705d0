// mlaconf kernel benchmark: each optimized/ kernel at GLM-5's production shapes, on the device, with the
// two ceilings (copy bandwidth, fp16 matmul rate) measured in the same run. Standalone: it links the
// optimized/ kernels, core/ggml_types and cuBLAS only (no Eigen, HDF5 or CLI11), so that a GPU host
// with nvcc alone can build it (bench/gpu_kernel_bench.sh).
//
// Method (docs/perf/method.md): inputs rotate over more than 200 MB (H200 L2: 60 MB), so no call reads
// what the previous one left in L2; warm-up, then every call is enqueued back to back between CUDA
// events and the median of the per-call times is reported. Every case has an explicit byte model (each
// input read once, each output written once) and FLOP model; the floor is bytes / measured copy bandwidth.
//
//   kernel_bench [--json FILE] [--reps N] [--only SUBSTRING]
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/ggml_types.h"
#include "optimized/api.h"
#include "optimized/gemv_mma.cuh"

using namespace mlaconf;
using namespace mlaconf::cuda;

namespace {

#define CK(call)                                                                               \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "kernel_bench: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

int g_reps = 50;

// Median per-call microseconds of `call(i)` for i = 0.. (rotating inputs inside call), after warm-up.
double time_us(const std::function<void(int)>& call, int reps = -1) {
  if (reps < 0) reps = g_reps;
  for (int i = 0; i < 3; ++i) call(i);
  CK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(reps + 1);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  CK(cudaEventRecord(ev[0], 0));
  for (int i = 0; i < reps; ++i) {
    call(i + 3);
    CK(cudaEventRecord(ev[i + 1], 0));
  }
  CK(cudaEventSynchronize(ev[reps]));
  CK(cudaGetLastError());
  std::vector<double> t(reps);
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
    t[i] = ms * 1e3;
  }
  for (auto& e : ev) CK(cudaEventDestroy(e));
  std::sort(t.begin(), t.end());
  return t[reps / 2];
}

struct Row {
  std::string name, kernel, note;
  double us = 0, bytes = 0, flops = 0;
  std::string extra;  // extra JSON members ("\"k\": v, ...")
};
std::vector<Row> g_rows;
double g_copy_gbs = 0, g_mma_tflops = 0;

void report(Row r) {
  const double gbs = r.bytes / (r.us * 1e3), tfl = r.flops / (r.us * 1e6);
  const double floor_us = g_copy_gbs > 0 ? r.bytes / (g_copy_gbs * 1e3) : 0;
  std::printf("%-44s %10.2f us %9.1f GB/s %8.2f TFLOP/s  %5.1f%% of floor  %s\n", r.name.c_str(), r.us, gbs, tfl,
              floor_us > 0 ? 100.0 * floor_us / r.us : 0.0, r.note.c_str());
  std::fflush(stdout);
  g_rows.push_back(std::move(r));
}

bool g_only_set = false;
std::string g_only;
bool wanted(const std::string& name) { return !g_only_set || name.find(g_only) != std::string::npos; }

// Failed kernel families ("sparse_mla", "gemv", "indexer", "topk"): their cases are not timed, the
// others still are (one device run must not be lost to one kernel), and the program exits 1.
std::vector<std::string> g_failed;
void check_row(const std::string& what, double e, double bound) {
  const bool ok = e <= bound;
  std::printf("check %-60s NMSE %.3e (bound %.0e) %s\n", what.c_str(), e, bound, ok ? "ok" : "FAIL");
  if (!ok) g_failed.push_back(what.substr(0, what.find_first_of("( ")));
}
bool failed(const std::string& family) {
  for (const auto& f : g_failed)
    if (f.rfind(family, 0) == 0) return true;
  return false;
}

// ---- ceilings ------------------------------------------------------------------------------------
void ceilings() {
  const size_t n = 1ull << 30;  // 1 GiB each way
  DeviceBuffer a(n), b(n);
  fill_pattern_f16(a.as<uint16_t>(), (int64_t)(n / 2 / 4096), 4096, 7);
  const double us = time_us([&](int) { CK(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice, 0)); }, 20);
  g_copy_gbs = 2.0 * n / (us * 1e3);
  report({"copy_bandwidth(1GiB d2d)", "cudaMemcpy", "read + write counted", us, 2.0 * n, 0});

  const int N = 8192;
  DeviceBuffer x((size_t)N * N * 2), w((size_t)N * N * 2), y((size_t)N * N * 4);
  fill_pattern_f16(x.as<uint16_t>(), N, N, 1);
  fill_pattern_f16(w.as<uint16_t>(), N, N, 2);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) std::exit(1);
  const float one = 1, zero = 0;
  const double gus = time_us(
      [&](int) {
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, N, N, &one, w.get(), CUDA_R_16F, N, x.get(), CUDA_R_16F, N, &zero,
                     y.get(), CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      },
      10);
  g_mma_tflops = 2.0 * N * N * N / (gus * 1e6);
  report({"fp16_matmul_rate(8192^3, fp32 acc, cuBLAS)", "cublasGemmEx", "random data", gus, 3.0 * N * N * 2 + 0.0 * N * N,
          2.0 * N * N * N});
  cublasDestroy(h);
}

// ---- sparse MLA decode ---------------------------------------------------------------------------
// B queries (64 heads, d 576/512), each from its own sequence of ctx rows in a shared latent cache
// (index lists are absolute rows). Rotation: n_sets index/query sets over distinct cache regions.
void sparse_mla_case(int64_t B, int64_t ctx, int heads_per_cta = 0, int64_t split = 0) {
  const int64_t H = 64, dqk = 576, dv = 512, topk = 2048;
  const double row_bytes_ = dqk * 2.0;
  const double call_bytes = B * (topk * row_bytes_ + H * dqk * 2.0 + topk * 4.0 + H * dv * 4.0);
  const int n_sets = std::max<int>(2, (int)std::ceil(200e6 / call_bytes));
  const int64_t regions = n_sets * B;
  const int64_t L = regions * ctx;
  std::string name = "sparse_mla_decode(B=" + std::to_string(B) + ",h=64,d=576,dv=512,topk=2048,ctx=" + std::to_string(ctx) +
                     (heads_per_cta ? ",hpc=" + std::to_string(heads_per_cta) : std::string()) +
                     (split ? ",split=" + std::to_string(split) : std::string()) + ")";
  if (!wanted(name) || failed("sparse_mla")) return;
  DeviceBuffer cache((size_t)L * dqk * 2), q((size_t)n_sets * B * H * dqk * 2), idx((size_t)n_sets * B * topk * 4),
      out((size_t)B * H * dv * 4);
  fill_pattern_f16(cache.as<uint16_t>(), L, dqk, 11);
  fill_pattern_f16(q.as<uint16_t>(), n_sets * B * H, dqk, 12);
  std::vector<int32_t> hidx((size_t)n_sets * B * topk);
  std::vector<int32_t> perm(ctx);
  std::mt19937_64 rng(5);
  for (int64_t s = 0; s < n_sets * B; ++s) {  // query s reads region s: 2048 distinct random rows of it
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = 0; i < topk; ++i) std::swap(perm[i], perm[i + rng() % (ctx - i)]);
    for (int64_t i = 0; i < topk; ++i) hidx[s * topk + i] = (int32_t)(s * ctx + perm[i]);
  }
  idx.upload(hidx.data(), hidx.size() * 4);
  SparseMlaArgs a;
  a.cache = cache.as<uint16_t>();
  a.L = L;
  a.T = B, a.H = H, a.d_qk = dqk, a.d_v = dv, a.top_k = topk;
  a.scale = 1.0f / std::sqrt(192.0f);
  a.out = out.as<float>();
  a.heads_per_cta = heads_per_cta;
  a.split = split;
  const double us = time_us([&](int i) {
    const int s = i % n_sets;
    a.q = q.as<uint16_t>() + (size_t)s * B * H * dqk;
    a.idx = idx.as<int32_t>() + (size_t)s * B * topk;
    sparse_mla(a);
  });
  Row r{name, "sparse_mla", "rotating " + std::to_string(n_sets) + " sets", us, call_bytes,
        (double)B * topk * H * (dqk + dv) * 2.0};
  r.extra = "\"B\": " + std::to_string(B);
  report(r);
}

// ---- indexer -------------------------------------------------------------------------------------
// B queries of B sequences (32 heads x 128, each over its own L keys): scores + top-2048. fp16 keys (the
// tensor-core path, indexer_scores_batched, then topk_rows) and fp32 keys (the pipeline's choice and call:
// indexer_topk_f32_rows, one scores launch for all B with key regions by device offsets and the top-k's
// first pass fused in, then the top-k's collect launch; and indexer_select_f32_rows, the decode step's call:
// the same selection, tensor-core bounds and exact scores for the keys they cannot rule out). The scores alone and the top-k alone (topk_rows,
// both of its launches) are timed too. Byte model: keys + q + w + the top-k written (the scores stay in L2 between the two
// kernels at B = 1; at B = 16 and L = 128K they are 8 MB, also L2-resident).
template <class In>
void indexer_case(int64_t B, int64_t L, bool f16) {
  const int64_t Hi = 32, Di = 128, topk = 2048;
  const std::string name = std::string("indexer(B=") + std::to_string(B) + ",hi=32,di=128,topk=2048,L=" + std::to_string(L) +
                           ",keys=" + (f16 ? "f16" : "f32") + ")";
  if (!wanted(name) || failed("indexer") || failed("topk")) return;
  const double key_bytes = (double)L * Di * sizeof(In);
  const int n_sets = std::max<int>(2, (int)std::ceil(200e6 / (B * key_bytes)));
  const int64_t nk = n_sets * B;
  DeviceBuffer k((size_t)nk * L * Di * sizeof(In)), q((size_t)nk * Hi * Di * sizeof(In)), w((size_t)nk * Hi * 4),
      pos((size_t)4), scores((size_t)B * L * 4), out((size_t)B * topk * 4);
  if (f16) {
    fill_pattern_f16(k.as<uint16_t>(), nk * L, Di, 21);
    fill_pattern_f16(q.as<uint16_t>(), nk * Hi, Di, 22);
  } else {
    for (int64_t s = 0; s < nk; ++s) fill_pattern_f32(k.as<float>() + s * L * Di, L, Di, 21 + s);  // f16 pattern values
    std::vector<float> hq(nk * Hi * Di);
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& v : hq) v = u(rng);
    q.upload(hq.data(), hq.size() * 4);
  }
  // Key offsets of set s's B sequences (elements), one device array per set (the fp32 rows entry point).
  std::vector<int64_t> hoff(nk);
  for (int64_t i = 0; i < nk; ++i) hoff[i] = i * L * Di;
  DeviceBuffer koff = to_device(hoff);
  std::vector<float> hw(nk * Hi);
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<float> u(0.01f, 0.2f);
  for (auto& v : hw) v = u(rng);
  w.upload(hw.data(), hw.size() * 4);
  const std::vector<int32_t> lasts(B, (int32_t)(L - 1));
  pos = to_device(lasts);
  auto all_scores = [&](int i) {
    const int64_t s = (int64_t)(i % n_sets) * B;  // the set's first sequence
    if constexpr (sizeof(In) == 2)
      indexer_scores_batched(reinterpret_cast<const uint16_t*>(q.as<In>() + s * Hi * Di), reinterpret_cast<const uint16_t*>(k.as<In>() + s * L * Di),
                             L * Di, w.as<float>() + s * Hi, pos.as<int32_t>(), B, Hi, Di, L, scores.as<float>());
    else
      indexer_scores_f32_rows(q.as<float>() + s * Hi * Di, k.as<float>(), koff.as<int64_t>() + s, w.as<float>() + s * Hi,
                              pos.as<int32_t>(), B, Hi, Di, L, scores.as<float>());
  };
  const double flops = (double)B * L * Hi * Di * 2.0;
  const double bytes = B * (key_bytes + Hi * Di * sizeof(In) + Hi * 4.0 + topk * 4.0);
  const std::string tag = "rotating " + std::to_string(n_sets) + " key sets";
  // fp32: the pipeline's call (indexer_topk_f32_rows: the top-k's first pass fused into the scores kernel).
  const double us_all = time_us([&](int i) {
    if constexpr (sizeof(In) == 2) {
      all_scores(i);
      topk_rows(scores.as<float>(), B, L, topk, out.as<int32_t>());
    } else {
      const int64_t s = (int64_t)(i % n_sets) * B;
      indexer_topk_f32_rows(q.as<float>() + s * Hi * Di, k.as<float>(), koff.as<int64_t>() + s, w.as<float>() + s * Hi,
                            pos.as<int32_t>(), B, Hi, Di, L, topk, scores.as<float>(), out.as<int32_t>());
    }
  });
  report({name, "indexer_scores+topk_rows", tag, us_all, bytes, flops});
  if constexpr (sizeof(In) == 4) {  // the decode step's call: the same selection, bounds on the tensor cores
    const double us_sel = time_us([&](int i) {
      const int64_t s = (int64_t)(i % n_sets) * B;
      indexer_select_f32_rows(q.as<float>() + s * Hi * Di, k.as<float>(), koff.as<int64_t>() + s, w.as<float>() + s * Hi,
                              pos.as<int32_t>(), B, Hi, Di, L, topk, scores.as<float>(), out.as<int32_t>());
    });
    report({"indexer_select" + name.substr(7), "indexer_select_f32_rows", tag, us_sel, bytes, flops});
    const std::vector<float> z = to_host<float>(scores, B * L);  // the last call's: finite where it refined
    int64_t refined = 0;
    for (float v : z) refined += std::isfinite(v);
    std::printf("measure %s: exact scores computed for %lld of %lld keys\n", ("indexer_select" + name.substr(7)).c_str(),
                (long long)refined, (long long)(B * L));
  }
  const double us_s = time_us([&](int i) { all_scores(i); });
  report({"indexer_scores" + name.substr(7), "indexer_scores", tag + "; bytes: keys + scores written",
          us_s, bytes + B * L * 4.0, flops});
  const double us_t = time_us([&](int) { topk_rows(scores.as<float>(), B, L, topk, out.as<int32_t>()); });
  report({"indexer_topk" + name.substr(7), "topk_rows", "bytes: scores read once", us_t, B * (L * 4.0 + topk * 4.0), 0});
}

// n random floats in [-1, 1) on the device.
DeviceBuffer random_f32(int64_t n, uint64_t seed) {
  std::vector<float> h((size_t)n);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : h) v = u(rng);
  return to_device(h);
}

// ---- Q4_K GEMV -----------------------------------------------------------------------------------
// Random Q4_K blocks (random scales in a sane range) for n matrices of rows x cols.
void random_q4k(DeviceBuffer* w, int64_t n_mats, int64_t rows, int64_t cols) {
  const int64_t rb = row_bytes(GgmlType::Q4_K, cols);
  const size_t per = (size_t)rows * rb;
  std::vector<uint8_t> h(per);
  std::mt19937_64 rng(9);
  for (auto& b : h) b = (uint8_t)rng();
  // d and dmin: small positive halves, so the values are finite and of a realistic size.
  for (size_t off = 0; off < per; off += 144) {
    const uint16_t d = float_to_half_bits(0.001f + (rng() % 1000) * 1e-6f), m = float_to_half_bits(0.0005f + (rng() % 1000) * 1e-6f);
    std::memcpy(&h[off], &d, 2);
    std::memcpy(&h[off + 2], &m, 2);
  }
  *w = DeviceBuffer((size_t)n_mats * per);
  for (int64_t i = 0; i < n_mats; ++i) w->upload(h.data(), per, (size_t)i * per);  // same bytes, distinct addresses
}

// Kernels suffix of a case name (KernelConfig::gemv, optimized/kernel_config.h): none for the default kernels
// (tensor cores or SIMT by the shape), mma Q4_K and Q6_K on the tensor cores at every shape, simt the SIMT kernels
// at every shape.
std::string variant_tag(GemvKernel v) {
  switch (v) {
    case GemvKernel::Mma: return ",variant=mma";
    case GemvKernel::Simt: return ",variant=simt";
    default: return "";
  }
}
// The kernels timed on every case (the same inputs).
constexpr GemvKernel kVariants[] = {GemvKernel::Default, GemvKernel::Mma, GemvKernel::Simt};

// B x vectors on one rows x cols Q4_K matrix (batched decode: every sequence's token through the same
// weights; B = 1 is plain decode), rotating over a pool of matrices. Bytes: the matrix once, B x, B y.
void q4k_case(int64_t rows, int64_t cols, int B) {
  const std::string stem = "gemv(type=Q4_K,rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols) +
                           (B > 1 ? ",b=" + std::to_string(B) : std::string());
  if (failed("gemv") || !wanted(stem)) return;
  const double mat_bytes = (double)rows * row_bytes(GgmlType::Q4_K, cols);
  const int64_t pool = std::max<int64_t>(2, (int64_t)std::ceil(220e6 / mat_bytes));
  DeviceBuffer w;
  random_q4k(&w, pool, rows, cols);
  DeviceBuffer x = random_f32((size_t)B * cols, 2), y((size_t)B * rows * 4);
  const uint8_t* wp = w.as<uint8_t>();
  for (GemvKernel variant : kVariants) {
    const double us = time_us([&](int i) {
      gemv(GgmlType::Q4_K, wp + (size_t)(i % pool) * (size_t)mat_bytes, rows, cols, x.as<float>(), y.as<float>(), B, 0, cols, rows,
           variant);
    });
    report({stem + variant_tag(variant) + ")", "gemv", "rotating " + std::to_string(pool) + " matrices, " + std::to_string(B) + " x on one matrix", us,
            mat_bytes + B * (cols + rows) * 4.0, 2.0 * rows * cols * B});
  }
}

// The 8 used experts of each of `tokens` tokens (distinct within a token), drawn at random from a pool of
// `pool`: ids [tokens * 8].
std::vector<int32_t> draw_expert_ids(std::mt19937_64& rng, int64_t pool, int64_t tokens) {
  std::vector<int32_t> ids((size_t)tokens * 8), p(pool);
  for (int64_t b = 0; b < tokens; ++b) {
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), rng);
    std::copy(p.begin(), p.begin() + 8, ids.begin() + b * 8);
  }
  return ids;
}

// 8 used experts of one token (one x, 8 outputs) in one call, chosen at random from a pool each call.
void q4k_experts_case(int64_t rows, int64_t cols) {
  const std::string stem = "gemv_experts(type=Q4_K,experts=8,rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols);
  if (failed("gemv") || !wanted(stem)) return;
  const double mat_bytes = (double)rows * row_bytes(GgmlType::Q4_K, cols);
  const int64_t pool = std::max<int64_t>(16, (int64_t)std::ceil(220e6 / mat_bytes));
  DeviceBuffer w;
  random_q4k(&w, pool, rows, cols);
  std::vector<float> hx(cols);
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : hx) v = u(rng);
  const std::vector<int32_t> ids = draw_expert_ids(rng, pool, 64);  // 64 calls' sets
  DeviceBuffer x = to_device(hx), y((size_t)8 * rows * 4), d_ids = to_device(ids);
  const uint8_t* wp = w.as<uint8_t>();
  for (GemvKernel variant : kVariants) {
    const double us = time_us([&](int i) {
      gemv_experts(GgmlType::Q4_K, wp, (int64_t)mat_bytes, d_ids.as<int32_t>() + (i % 64) * 8, 8, rows, cols, x.as<float>(), 0,
                   y.as<float>(), rows, nullptr, variant);
    });
    report({stem + variant_tag(variant) + ")", "gemv_experts", "8 of " + std::to_string(pool) + " experts, random per call", us,
            8 * mat_bytes + cols * 4.0 + 8 * rows * 4.0, 8 * 2.0 * rows * cols});
  }
}

// Batched MoE decode: B tokens x 8 used experts each (distinct per token, random from GLM-5's 256), one x
// per (token, expert) entry, all 8 B entries in one call. Bytes: each distinct expert once, x and y per entry.
void q4k_experts_batch_case(int64_t rows, int64_t cols, int B) {
  const std::string stem = "gemv_experts(type=Q4_K,experts=8,of=256,b=" + std::to_string(B) + ",rows=" + std::to_string(rows) +
                           ",cols=" + std::to_string(cols);
  if (failed("gemv") || !wanted(stem)) return;
  const double mat_bytes = (double)rows * row_bytes(GgmlType::Q4_K, cols);
  constexpr int64_t kPool = 256, kSets = 16;
  DeviceBuffer w;
  random_q4k(&w, kPool, rows, cols);
  const int64_t n = 8 * B;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> hx((size_t)n * cols);
  for (auto& v : hx) v = u(rng);
  const std::vector<int32_t> ids = draw_expert_ids(rng, kPool, kSets * B);  // kSets sets of B tokens
  double distinct = 0;
  for (int64_t set = 0; set < kSets; ++set) {
    std::vector<char> used(kPool, 0);
    for (int64_t j = 0; j < n; ++j) used[ids[set * n + j]] = 1;
    distinct += std::count(used.begin(), used.end(), 1) / (double)kSets;
  }
  DeviceBuffer x = to_device(hx), y((size_t)n * rows * 4), d_ids = to_device(ids);
  const uint8_t* wp = w.as<uint8_t>();
  for (GemvKernel variant : kVariants) {
  const double us = time_us([&](int i) {
    gemv_experts(GgmlType::Q4_K, wp, (int64_t)mat_bytes, d_ids.as<int32_t>() + (i % kSets) * n, n, rows, cols, x.as<float>(),
                 cols, y.as<float>(), rows, nullptr, variant);
  });
  report({stem + variant_tag(variant) + ")", "gemv_experts",
          std::to_string(n) + " entries, " + std::to_string((int)distinct) + " distinct experts on average", us,
          distinct * mat_bytes + n * (cols + rows) * 4.0, n * 2.0 * rows * cols});
  }
  // The same entries grouped by expert, as the pipeline's step runs them from 1 pick per 4 experts on average:
  // group_pairs, the x rows gathered into slot order, gemv_experts_grouped writing rows back in entry order (the
  // pipeline groups once per layer for its three matrices; here every call groups).
  if (n > kGroupPairsMax || !gemv_experts_mma_ok(GgmlType::Q4_K, rows, cols)) return;
  std::vector<int32_t> tok((size_t)n);
  for (int64_t j = 0; j < n; ++j) tok[j] = (int32_t)j;
  DeviceBuffer d_tok = to_device(tok), ord((size_t)n * 4), ts((size_t)n * 4), grp((size_t)n * 16), ng(4), xs((size_t)n * cols * 4);
  // An expert's gate / up (up to 128 row tiles) split over 4 warps in CTAs of 4; the down in CTAs of 2 row tiles
  // sharing x through shared memory.
  {
    const double gus = time_us([&](int i) {
      group_pairs(d_ids.as<int32_t>() + (i % kSets) * n, d_tok.as<int32_t>(), n, ord.as<int32_t>(), ts.as<int32_t>(),
                  grp.as<int32_t>(), ng.as<int32_t>());
      gather_rows(x.as<float>(), cols, ts.as<int32_t>(), n, cols, xs.as<float>(), cols);
      gemv_experts_grouped(GgmlType::Q4_K, wp, (int64_t)mat_bytes, rows, cols, grp.as<int32_t>(), ng.as<int32_t>(), n,
                           xs.as<float>(), cols, y.as<float>(), rows, ord.as<int32_t>());
    });
    report({stem + ",grouped)", "gemv_experts",
            std::to_string(n) + " entries grouped by expert (group_pairs + gather + gemv_experts_grouped), " +
                std::to_string((int)distinct) + " distinct experts on average",
            gus, distinct * mat_bytes + n * (cols + rows) * 4.0, n * 2.0 * rows * cols});
  }
}

// The pipeline's Q4_K decode shapes (GLM-5 dims), each kernel variant in the same run.
void gemv_cases() {
  const int64_t shapes[][2] = {{2048, 6144}, {16384, 2048}, {6144, 16384}, {576, 6144}, {12288, 6144}, {6144, 12288}};
  for (int B : {1, 8})
    for (const auto& sh : shapes) q4k_case(sh[0], sh[1], B);
  // A server's batch: q_b and the dense FFN's gate / up at 16, 32 and 64 x (passes of 16 x from 33 x on where a warp
  // streams at least 8 blocks), and
  // kv_a (576 x 6144, below the tensor-core GEMV's default shapes: its ",variant=mma" row beside the SIMT default).
  for (int B : {16, 32, 64})
    for (const auto& sh : {std::array<int64_t, 2>{16384, 2048}, std::array<int64_t, 2>{12288, 6144}, std::array<int64_t, 2>{576, 6144}})
      q4k_case(sh[0], sh[1], B);
  for (const auto& sh : {std::array<int64_t, 2>{2048, 6144}, std::array<int64_t, 2>{6144, 2048}}) q4k_experts_case(sh[0], sh[1]);
  // 8 and 16 tokens: grouped in the pipeline (from one pick per 4 experts on average), where grouped passes were level
  // with the experts by id at 8.
  for (int B : {8, 16, 32, 64}) q4k_experts_batch_case(2048, 6144, B);
  q4k_experts_batch_case(6144, 2048, 64);  // the down (beyond 128 row tiles: K over 2 warps, CTAs of 2 row tiles)
}

// ---- block-type GEMVs (optimized/gemv_blocks.cu): GLM-5's Q6_K output head and attention shapes ------
// B x vectors on one matrix (batched decode: every sequence's token through the same weights).
// Byte offsets of a block's f16 scale fields, set to small sane values so that outputs stay finite.
std::vector<int> f16_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q6_K: return {208};
    case GgmlType::Q5_K: case GgmlType::Q4_K: return {0, 2};
    default: return {0};  // Q8_0
  }
}
// n_mats copies (same bytes, distinct addresses) of one random rows x cols matrix of type t.
void random_mats(DeviceBuffer* w, GgmlType t, int64_t n_mats, int64_t rows, int64_t cols, uint64_t seed) {
  const size_t per = (size_t)rows * row_bytes(t, cols);
  const int64_t ts = traits(t).type_size;
  std::vector<uint8_t> h(per + 8);
  std::mt19937_64 rng(seed);
  for (size_t off = 0; off < per; off += 8) {
    const uint64_t v = rng();
    std::memcpy(&h[off], &v, 8);
  }
  const std::vector<int> fields = f16_fields(t);
  for (size_t off = 0; off < per; off += ts)
    for (int f : fields) {
      const uint16_t d = float_to_half_bits(0.0005f + (rng() % 1000) * 1e-6f);
      std::memcpy(&h[off + f], &d, 2);
    }
  *w = DeviceBuffer((size_t)n_mats * per);
  for (int64_t i = 0; i < n_mats; ++i) w->upload(h.data(), per, (size_t)i * per);
}

// Bytes: the matrix once, B x vectors, B y vectors. FLOPs: 2 per weight and x.
void gemv_block_case(GgmlType t, int64_t rows, int64_t cols, int B) {
  const std::string stem = std::string("gemv(type=") + type_name(t) + ",rows=" + std::to_string(rows) + ",cols=" +
                           std::to_string(cols) + ",b=" + std::to_string(B);
  if (failed("gemv") || !wanted(stem)) return;
  const double mat_bytes = (double)rows * row_bytes(t, cols);
  const int64_t pool = std::max<int64_t>(1, (int64_t)std::ceil(220e6 / mat_bytes));
  DeviceBuffer w;
  random_mats(&w, t, pool, rows, cols, 11);
  DeviceBuffer x = random_f32((size_t)B * cols, 5), y((size_t)B * rows * 4);
  const uint8_t* wp = w.as<uint8_t>();
  for (GemvKernel variant : kVariants) {
    const double us = time_us([&](int i) {
      gemv(t, wp + (size_t)(i % pool) * (size_t)mat_bytes, rows, cols, x.as<float>(), y.as<float>(), B, 0, cols, rows, variant);
    });
    report({stem + variant_tag(variant) + ")", "gemv_blocks", "rotating " + std::to_string(pool) + " matrices, " + std::to_string(B) + " x on one matrix", us,
            mat_bytes + B * (cols + rows) * 4.0, 2.0 * rows * cols * B});
  }
}

// Per-head matrices as the pipeline runs them at decode (T tokens x H heads, entry b on head b % H):
// W_UK^T (attn_k_b, Q5_0 512 x 192) and W_UV (attn_v_b, 256 x 512). Bytes: H matrices, T H x and y.
void gemv_per_head_case(GgmlType t, int64_t rows, int64_t cols, int64_t H, int64_t T) {
  const std::string stem = std::string("gemv_per_head(type=") + type_name(t) + ",rows=" + std::to_string(rows) + ",cols=" +
                           std::to_string(cols) + ",heads=" + std::to_string(H) + ",t=" + std::to_string(T);
  if (failed("gemv") || !wanted(stem)) return;
  const double set_bytes = (double)H * rows * row_bytes(t, cols);
  const int64_t pool = std::max<int64_t>(1, (int64_t)std::ceil(220e6 / set_bytes));
  DeviceBuffer w;
  random_mats(&w, t, pool * H, rows, cols, 13);
  DeviceBuffer x = random_f32((size_t)T * H * cols, 6), y((size_t)T * H * rows * 4);
  const uint8_t* wp = w.as<uint8_t>();
  for (GemvKernel variant : kVariants) {
  const double us = time_us([&](int i) {
    gemv_per_head(t, wp + (size_t)(i % pool) * (size_t)set_bytes, rows, cols, H, x.as<float>(), cols, y.as<float>(), rows, T * H,
                  variant);
  });
  report({stem + variant_tag(variant) + ")", "gemv_blocks", "rotating " + std::to_string(pool) + " head sets", us,
          set_bytes + T * H * (cols + rows) * 4.0, 2.0 * rows * cols * H * T});
  }
}

void gemv_block_cases() {
  for (int B : {1, 8}) {
    gemv_block_case(GgmlType::Q6_K, 154880, 6144, B);  // output head
    gemv_block_case(GgmlType::Q6_K, 16384, 6144, B);
    gemv_block_case(GgmlType::Q6_K, 6144, 16384, B);   // attn_output (64 heads x 256 -> 6144)
    gemv_block_case(GgmlType::Q8_0, 6144, 16384, B);
    gemv_block_case(GgmlType::Q5_K, 6144, 16384, B);
  }
  // The head and attn_output at a server's batch: the head stages x in shared memory from 9 x on, in passes of 16 x;
  // attn_output takes passes of 16 x from 33 x on.
  for (int B : {16, 32, 64}) {
    gemv_block_case(GgmlType::Q6_K, 154880, 6144, B);
    gemv_block_case(GgmlType::Q6_K, 6144, 16384, B);
  }
  for (int64_t T : {1, 8}) {
    gemv_per_head_case(GgmlType::Q5_0, 512, 192, 64, T);
    gemv_per_head_case(GgmlType::Q6_K, 256, 512, 64, T);
  }
  // W_UV as the synthesized GLM-5 stack has it (Q4_K: gemv_q4k_v2, each head's pass over up to 4 of its tokens).
  for (int64_t T : {1, 8, 64}) gemv_per_head_case(GgmlType::Q4_K, 256, 512, 64, T);
}

// ---- float GEMV (optimized/gemv_float.cu): the MoE router's F32 6144 x 256 matrix ------------------
// Bytes: the matrix once, B x vectors, B y vectors (B x share the matrix, as a batch's router does).
void gemv_float_case(int64_t rows, int64_t cols, int B) {
  const std::string name = "gemv(type=F32,rows=" + std::to_string(rows) + ",cols=" + std::to_string(cols) + ",b=" +
                           std::to_string(B) + ")";
  if (failed("gemv") || !wanted(name)) return;
  const double mat_bytes = (double)rows * cols * 4;
  const int64_t pool = std::max<int64_t>(1, (int64_t)std::ceil(220e6 / mat_bytes));
  DeviceBuffer w = random_f32(pool * rows * cols, 13), x = random_f32((int64_t)B * cols, 5), y((size_t)B * rows * 4);
  const float* wp = w.as<float>();
  const double us = time_us([&](int i) {
    gemv(GgmlType::F32, wp + (size_t)(i % pool) * rows * cols, rows, cols, x.as<float>(), y.as<float>(), B, 0, cols, rows);
  });
  report({name, "gemv_float", "rotating " + std::to_string(pool) + " matrices, " + std::to_string(B) + " x on one matrix",
          us, mat_bytes + B * (cols + rows) * 4.0, 2.0 * rows * cols * B});
}
void gemv_float_cases() {
  for (int B : {1, 8}) gemv_float_case(256, 6144, B);  // GLM-5's router (ffn_gate_inp)
}

// ---- greedy picks (optimized/ops.cu argmax_rows): B rows of the vocabulary's 154880 logits ----------
// Bytes: the logits once (and B ids).
void argmax_case(int64_t B, int64_t n) {
  const std::string name = "argmax_rows(B=" + std::to_string(B) + ",n=" + std::to_string(n) + ")";
  if (!wanted(name)) return;
  const double bytes = (double)B * n * 4;
  const int64_t pool = std::max<int64_t>(1, (int64_t)std::ceil(220e6 / bytes));
  DeviceBuffer x = random_f32(pool * B * n, 17), out((size_t)B * 4);
  const double us = time_us([&](int i) { argmax_rows(x.as<float>() + (size_t)(i % pool) * B * n, B, n, out.as<int32_t>()); });
  report({name, "argmax_rows", "rotating " + std::to_string(pool) + " logit sets", us, bytes + B * 4.0, 0});
}


// ---- correctness gate (runs first: a fast wrong kernel is worth nothing) --------------------------
double nmse_vs(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den > 0 ? num / den : num;
}

// Sparse MLA, d 576/512, B queries each over its own region, 30% of the slots -1, against float64.
void check_sparse_mla(int64_t B, int hpc, int64_t split) {
  const int64_t H = 64, dqk = 576, dv = 512, topk = 2048, ctx = 4096, L = B * ctx;
  DeviceBuffer cache((size_t)L * dqk * 2), out((size_t)B * H * dv * 4);
  fill_pattern_f16(cache.as<uint16_t>(), L, dqk, 31);
  std::mt19937_64 rng(B * 7 + hpc + split);
  std::vector<uint16_t> qb(B * H * dqk);
  std::vector<float> q(qb.size());
  std::uniform_real_distribution<float> u(-1, 1);
  for (size_t i = 0; i < qb.size(); ++i) q[i] = half_bits_to_float_host(qb[i] = float_to_half_bits(u(rng)));
  std::vector<int32_t> idx(B * topk);
  std::vector<int32_t> perm(ctx);
  for (int64_t b = 0; b < B; ++b) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t i = 0; i < topk; ++i) idx[b * topk + i] = (rng() % 10 < 3) ? -1 : (int32_t)(b * ctx + perm[i]);
  }
  DeviceBuffer dq = to_device(qb), di = to_device(idx);
  SparseMlaArgs a;
  a.q = dq.as<uint16_t>(), a.cache = cache.as<uint16_t>(), a.L = L, a.idx = di.as<int32_t>();
  a.T = B, a.H = H, a.d_qk = dqk, a.d_v = dv, a.top_k = topk, a.scale = 1.0f / 16, a.out = out.as<float>();
  a.heads_per_cta = hpc, a.split = split;
  sparse_mla(a);
  sparse_mla(a);  // twice: the merge tickets must be left at zero
  std::vector<float> got = to_host<float>(out, B * H * dv);
  std::vector<double> want(got.size(), 0.0);
  std::vector<double> s(topk);
  auto kv = [&](int64_t row, int64_t c) { return (double)half_bits_to_float_host(pattern_half_bits(31, row, c)); };
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < topk; ++i)
      if (idx[b * topk + i] >= 0) rows.push_back(idx[b * topk + i]);
    std::vector<double> K(rows.size() * dqk);
    for (size_t j = 0; j < rows.size(); ++j)
      for (int64_t c = 0; c < dqk; ++c) K[j * dqk + c] = kv(rows[j], c);
    for (int64_t h = 0; h < H; ++h) {
      double mx = -INFINITY;
      for (size_t j = 0; j < rows.size(); ++j) {
        double d = 0;
        for (int64_t c = 0; c < dqk; ++c) d += (double)q[(b * H + h) * dqk + c] * K[j * dqk + c];
        s[j] = d * a.scale;
        mx = std::max(mx, s[j]);
      }
      double den = 0;
      for (size_t j = 0; j < rows.size(); ++j) den += (s[j] = std::exp(s[j] - mx));
      double* o = &want[(b * H + h) * dv];
      for (size_t j = 0; j < rows.size(); ++j)
        for (int64_t c = 0; c < dv; ++c) o[c] += s[j] / den * K[j * dqk + c];
    }
  }
  check_row("sparse_mla(B=" + std::to_string(B) + ",hpc=" + std::to_string(hpc) + ",split=" + std::to_string(split) +
                ",L=4096/seq,invalid=30pct)",
            nmse_vs(got, want), 1e-5);
}

// Q4_K GEMV (vectorised kernel) against float64 on the device-dequantized weights (bit-exact with the
// reference dequantizer, suites/gpu), single and as 3 experts picked by id.
void check_gemv() {
  const int64_t rows = 300, cols = 2048, pool = 5;
  DeviceBuffer w;
  random_q4k(&w, pool, rows, cols);
  const int64_t mat = rows * row_bytes(GgmlType::Q4_K, cols);
  DeviceBuffer wf((size_t)pool * rows * cols * 4);
  dequantize_f32(GgmlType::Q4_K, w.get(), pool * rows * cols, wf.as<float>());
  std::vector<float> W = to_host<float>(wf, pool * rows * cols);
  std::vector<float> hx(3 * cols);
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : hx) v = u(rng);
  DeviceBuffer x = to_device(hx), y((size_t)3 * rows * 4);
  gemv(GgmlType::Q4_K, w.get(), rows, cols, x.as<float>(), y.as<float>());
  std::vector<float> got = to_host<float>(y, rows);
  std::vector<double> want(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0;
    for (int64_t c = 0; c < cols; ++c) acc += (double)W[r * cols + c] * hx[c];
    want[r] = acc;
  }
  check_row("gemv(type=Q4_K,rows=300,cols=2048)", nmse_vs(got, want), 1e-10);
  const std::vector<int32_t> ids = {4, 0, 2};
  DeviceBuffer di = to_device(ids);
  gemv_experts(GgmlType::Q4_K, w.get(), mat, di.as<int32_t>(), 3, rows, cols, x.as<float>(), cols, y.as<float>(), rows);
  got = to_host<float>(y, 3 * rows);
  want.assign(3 * rows, 0.0);
  for (int j = 0; j < 3; ++j)
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) acc += (double)W[(ids[j] * rows + r) * cols + c] * hx[j * cols + c];
      want[j * rows + r] = acc;
    }
  check_row("gemv_experts(type=Q4_K,ids=4|0|2,rows=300,cols=2048)", nmse_vs(got, want), 1e-10);

  // The block-streaming kernel: 3 x on one matrix against float64 on the device-dequantized weights,
  // and each row's bits at B = 3 equal to B = 1 (batch invariance).
  for (GgmlType t : {GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q5_K}) {
    const int64_t r2 = 257, c2 = 768;
    DeviceBuffer wb;
    random_mats(&wb, t, 1, r2, c2, 21);
    DeviceBuffer wbf((size_t)r2 * c2 * 4);
    dequantize_f32(t, wb.get(), r2 * c2, wbf.as<float>());
    const std::vector<float> Wb = to_host<float>(wbf, r2 * c2);
    DeviceBuffer yb((size_t)3 * r2 * 4), y1((size_t)r2 * 4);
    gemv(t, wb.get(), r2, c2, x.as<float>(), yb.as<float>(), 3, 0, c2, r2);
    gemv(t, wb.get(), r2, c2, x.as<float>() + c2, y1.as<float>());
    const std::vector<float> gb = to_host<float>(yb, 3 * r2), g1 = to_host<float>(y1, r2);
    std::vector<double> wantb(3 * r2, 0.0);
    for (int j = 0; j < 3; ++j)
      for (int64_t r = 0; r < r2; ++r)
        for (int64_t c = 0; c < c2; ++c) wantb[j * r2 + r] += (double)Wb[r * c2 + c] * hx[j * c2 + c];
    const std::string tn = type_name(t);
    check_row("gemv(type=" + tn + ",rows=257,cols=768,b=3)", nmse_vs(gb, wantb), 1e-10);
    check_row("gemv(type=" + tn + ",rows=257,cols=768,b=3 vs b=1 bits)",
              std::memcmp(gb.data() + r2, g1.data(), r2 * 4) == 0 ? 0.0 : 1.0, 0.0);
  }
}

// The float GEMV (off-alignment rows and columns): 3 x on one matrix against float64, and each row's
// bits at B = 3 equal to B = 1 (batch invariance).
void check_gemv_float() {
  const int64_t rows = 257, cols = 6147;
  DeviceBuffer w = random_f32(rows * cols, 23), x = random_f32(3 * cols, 24), yb((size_t)3 * rows * 4), y1((size_t)rows * 4);
  const std::vector<float> W = to_host<float>(w, rows * cols), hx = to_host<float>(x, 3 * cols);
  gemv(GgmlType::F32, w.get(), rows, cols, x.as<float>(), yb.as<float>(), 3, 0, cols, rows);
  gemv(GgmlType::F32, w.get(), rows, cols, x.as<float>() + cols, y1.as<float>());
  const std::vector<float> gb = to_host<float>(yb, 3 * rows), g1 = to_host<float>(y1, rows);
  std::vector<double> want(3 * rows, 0.0);
  for (int j = 0; j < 3; ++j)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) want[j * rows + r] += (double)W[r * cols + c] * hx[j * cols + c];
  check_row("gemv(type=F32,rows=257,cols=6147,b=3)", nmse_vs(gb, want), 1e-10);
  check_row("gemv(type=F32,rows=257,cols=6147,b=3 vs b=1 bits)", std::memcmp(gb.data() + rows, g1.data(), rows * 4) == 0 ? 0.0 : 1.0,
            0.0);
}

// Indexer: the tensor-core fp16 scores against the fp32 kernel on the same (fp16-valued) inputs; then
// the selections of the fp16 path against the fp32 indexer on fp32 inputs (q, keys rounded to fp16 for
// the first): the flips that fp16 storage costs (reported, not gated: the pipeline keeps fp32).
void check_indexer() {
  const int64_t Hi = 32, Di = 128, L = 131072, topk = 2048;
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<float> u(-1, 1), uw(0.01f, 0.2f);
  std::vector<float> q(Hi * Di), k(L * Di), w(Hi), qr(q.size()), kr(k.size());
  std::vector<uint16_t> qh(q.size()), kh(k.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = u(rng), qr[i] = half_bits_to_float_host(qh[i] = float_to_half_bits(q[i]));
  for (size_t i = 0; i < k.size(); ++i) k[i] = u(rng), kr[i] = half_bits_to_float_host(kh[i] = float_to_half_bits(k[i]));
  for (auto& v : w) v = uw(rng);
  const int32_t last = (int32_t)(L - 1);
  DeviceBuffer dq = to_device(q), dk = to_device(k), dqr = to_device(qr), dkr = to_device(kr), dqh = to_device(qh),
               dkh = to_device(kh), dw = to_device(w), dpos = to_device(std::vector<int32_t>{last}), s16(L * 4), s32(L * 4),
               sref(L * 4), o16(topk * 4), o32(topk * 4);
  indexer_scores(dqh.as<uint16_t>(), dkh.as<uint16_t>(), dw.as<float>(), dpos.as<int32_t>(), 1, Hi, Di, L, s16.as<float>());
  indexer_scores_f32(dqr.as<float>(), dkr.as<float>(), dw.as<float>(), dpos.as<int32_t>(), 1, Hi, Di, L, sref.as<float>());
  indexer_scores_f32(dq.as<float>(), dk.as<float>(), dw.as<float>(), dpos.as<int32_t>(), 1, Hi, Di, L, s32.as<float>());
  {  // the tiled fp32 kernel (what indexer_scores_f32 runs here) against the SIMT kernel: the same bits
    DeviceBuffer simt(L * 4);
    indexer_scores_f32_simt(dq.as<float>(), dk.as<float>(), nullptr, dw.as<float>(), dpos.as<int32_t>(), 1, Hi, Di, L, simt.as<float>());
    const std::vector<float> x = to_host<float>(s32, L), y = to_host<float>(simt, L);
    int64_t differ = 0;
    for (int64_t i = 0; i < L; ++i) differ += std::memcmp(&x[i], &y[i], 4) != 0;
    check_row("indexer_scores_f32 (tiled) vs the SIMT kernel, L=131072 (scores that differ in any bit)", (double)differ, 0.0);
  }
  std::vector<float> a = to_host<float>(s16, L), b = to_host<float>(sref, L);
  check_row("indexer_scores(f16 tensor cores vs f32 kernel, same inputs, L=131072)", nmse_vs(a, std::vector<double>(b.begin(), b.end())), 1e-10);
  topk_rows(s16.as<float>(), 1, L, topk, o16.as<int32_t>());
  topk_rows(s32.as<float>(), 1, L, topk, o32.as<int32_t>());
  std::vector<int32_t> x = to_host<int32_t>(o16, topk), y = to_host<int32_t>(o32, topk);
  std::vector<int32_t> both;
  std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(both));
  std::printf("measure indexer top-2048 of L=131072: fp16 q/keys (tensor cores) vs fp32 indexer: %zu of 2048 selections differ\n",
              topk - both.size());
  // the top-k itself against a host sort of the same scores
  std::vector<float> sc = to_host<float>(s32, L);
  std::vector<int32_t> order(L);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t i, int32_t j) { return sc[i] > sc[j]; });
  std::vector<int32_t> want(order.begin(), order.begin() + topk);
  std::sort(want.begin(), want.end());
  check_row("topk_rows(L=131072,k=2048) vs host sort (exact: 1 = differs)", want == y ? 0.0 : 1.0, 0.0);
  {  // the pipeline's fused call on the same inputs: the same scores and selection
    DeviceBuffer sf(L * 4), of(topk * 4);
    indexer_topk_f32_rows(dq.as<float>(), dk.as<float>(), nullptr, dw.as<float>(), dpos.as<int32_t>(), 1, Hi, Di, L, topk, sf.as<float>(),
                          of.as<int32_t>());
    const std::vector<float> f = to_host<float>(sf, L);
    check_row("indexer_topk_f32_rows(L=131072,k=2048) vs scores + topk_rows (exact: 1 = differs)",
              to_host<int32_t>(of, topk) == y && std::memcmp(f.data(), sc.data(), L * 4) == 0 ? 0.0 : 1.0, 0.0);
  }
  {  // the decode step's call: the same selection; its work scores are finite exactly where it refined
    DeviceBuffer sf(L * 4), of(topk * 4);
    indexer_select_f32_rows(dq.as<float>(), dk.as<float>(), nullptr, dw.as<float>(), dpos.as<int32_t>(), 1, Hi, Di, L, topk, sf.as<float>(),
                            of.as<int32_t>());
    const std::vector<float> f = to_host<float>(sf, L);
    int64_t refined = 0;
    for (float v : f) refined += std::isfinite(v);
    std::printf("measure indexer_select_f32_rows(L=131072,k=2048): exact scores computed for %lld of %lld keys\n", (long long)refined,
                (long long)L);
    check_row("indexer_select_f32_rows(L=131072,k=2048) vs indexer_topk_f32_rows (exact: 1 = differs)", to_host<int32_t>(of, topk) == y ? 0.0 : 1.0,
              0.0);
  }
}

// With --only, the checks of the other kernel families are skipped too.
bool family_wanted(const std::string& f) {
  return !g_only_set || f.find(g_only) != std::string::npos || g_only.find(f) != std::string::npos;
}

void checks() {
  if (family_wanted("indexer")) check_indexer();
  if (family_wanted("gemv")) check_gemv();
  if (family_wanted("gemv")) check_gemv_float();
  if (!family_wanted("sparse_mla")) return;
  check_sparse_mla(1, 0, 0);
  check_sparse_mla(3, 16, 0);
  check_sparse_mla(2, 32, 2048);  // no split: the direct epilogue
  check_sparse_mla(2, 16, 48);    // many splits: the merge kernel
  check_sparse_mla(4, 32, 512);   // 4 splits: merged by the last CTA
  check_sparse_mla(2, 16, 2048);  // sparse_mla_rows: no split, and 4 splits merged by the last CTA
  check_sparse_mla(4, 16, 512);
  check_sparse_mla(36, 0, 0);     // automatic: 32 heads per CTA, no split
  for (int64_t split : {0, 48, 512, 2048}) check_sparse_mla(3, 32, split);  // 32 heads per CTA: each merge path
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json = argv[++i];
    else if (a == "--reps" && i + 1 < argc) g_reps = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) g_only_set = true, g_only = argv[++i];
    else {
      std::fprintf(stderr, "usage: kernel_bench [--json FILE] [--reps N] [--only SUBSTRING]\n");
      return 2;
    }
  }
  std::string why;
  if (!cuda_available(&why)) {
    std::fprintf(stderr, "kernel_bench: not supported: %s\n", why.c_str());
    return 3;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, sm_%d%d, %d SMs, L2 %d MB\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  try {
    checks();
    ceilings();
    sparse_mla_case(1, 32768);
    sparse_mla_case(64, 32768);
    // The configuration space around the automatic choice (16 heads per CTA: sparse_mla_rows).
    for (int64_t split : {32, 64, 128, 256, 512}) sparse_mla_case(1, 32768, 16, split);
    sparse_mla_case(8, 32768);
    sparse_mla_case(32, 32768);
    // The other of 16 and 32 heads per CTA (automatic: 32 from 8 queries) at each batch; and the stack's plan of
    // one query (16 splits of 128 rows at any batch: bit-identical to the query alone) at B = 64 with both.
    sparse_mla_case(1, 32768, 32);
    for (int64_t B : {8, 32, 64}) sparse_mla_case(B, 32768, 16);
    for (int64_t split : {64, 128}) sparse_mla_case(1, 32768, 32, split);
    for (int hpc : {16, 32}) sparse_mla_case(64, 32768, hpc, 128);
    indexer_case<uint16_t>(1, 131072, true);
    indexer_case<uint16_t>(16, 131072, true);
    // fp32 keys (the pipeline's indexer): one query and B = 16, at the 32K context of the GLM-5 stack and 128K
    for (int64_t L : {32768, 131072})
      for (int64_t B : {1, 16}) indexer_case<float>(B, L, false);
    gemv_cases();
    gemv_block_cases();
    gemv_float_cases();
    for (int64_t B : {1, 64}) argmax_case(B, 154880);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_bench: error: %s\n", e.what());
    return 1;
  }
  CK(cudaDeviceSynchronize());
  for (const auto& f : g_failed) std::printf("FAILED check: %s (its cases were not timed)\n", f.c_str());
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) return 2;
    std::fprintf(f, "{\n  \"source\": \"mlaconf\",\n  \"device\": \"%s\",\n  \"copy_gbs\": %.1f,\n  \"fp16_tflops\": %.1f,\n  \"rows\": [\n",
                 json_escape(prop.name).c_str(), g_copy_gbs, g_mma_tflops);
    for (size_t i = 0; i < g_rows.size(); ++i) {
      const Row& r = g_rows[i];
      std::fprintf(f,
                   "    {\"name\": \"%s\", \"kernel\": \"%s\", \"note\": \"%s\", \"us\": %.3f, \"bytes\": %.0f, \"flops\": %.0f, "
                   "\"gbs\": %.2f, \"tflops\": %.4f, \"pct_floor\": %.2f%s%s}%s\n",
                   json_escape(r.name).c_str(), r.kernel.c_str(), json_escape(r.note).c_str(), r.us, r.bytes, r.flops,
                   r.bytes / (r.us * 1e3), r.flops / (r.us * 1e6), 100.0 * r.bytes / (g_copy_gbs * 1e3) / r.us,
                   r.extra.empty() ? "" : ", ", r.extra.c_str(), i + 1 < g_rows.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  return g_failed.empty() ? 0 : 1;
}
