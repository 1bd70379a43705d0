// mlaconf optimized: MoE routing on the device (api.h: route_experts), for decode steps that must not
// wait for the host (the host routing reads the router logits back, a synchronization per MoE layer,
// and cannot run inside a CUDA graph).
//
// It selects the same experts with the same weights as the host's route_experts_host
// (optimized/route_host.cpp), bit for bit. Where order matters to the bits, the order is the host's:
// the softmax normaliser is one sequential fp32 sum in expert order (one thread), so is the sum of the
// selected probabilities (slot order). Everything else is exact whatever the order, so it runs in
// parallel: the elementwise steps; the max of the logits and the two best choices of a group (max is
// exact); the selections, as ranks under the host's stable sorts (an entry's place in a stable
// descending sort = the entries greater than it + the equal ones before it), so "ties to the lower
// index" holds by construction. Every float operation is an explicit _rn intrinsic: the library builds
// with --fmad=true, and a contraction here would break the equality.
#include <cmath>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"

namespace mlaconf::cuda {
namespace {

constexpr int kRouteThreads = 256;  // one CTA per row; 8 warps
constexpr int kRouteWarps = kRouteThreads / 32;

// The largest of v over the CTA (exact: max does not round), in every thread.
__device__ float cta_max(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // red may still be read from a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < kRouteWarps; ++w) v = fmaxf(v, red[w]);
  return v;
}

// The two largest values (duplicates count) of a, b, each a pair (first >= second): the pair of a multiset.
__device__ void top2_merge(float& a1, float& a2, float b1, float b2) {
  const float hi = fmaxf(a1, b1), lo = fminf(a1, b1);
  a2 = fmaxf(lo, fmaxf(a2, b2));
  a1 = hi;
}

// Entry i's place in a stable descending sort of v[0..n): the entries greater than it plus the equal ones
// before it (the host's std::stable_sort order, ties to the lower index).
__device__ __forceinline__ int64_t stable_desc_rank(const float* v, int64_t n, int64_t i) {
  const float x = v[i];
  int64_t rank = 0;
  for (int64_t j = 0; j < n; ++j) rank += (v[j] > x) | (v[j] == x && j < i);
  return rank;
}

__global__ void __launch_bounds__(kRouteThreads) route_kernel(RouteArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float red[kRouteWarps];
  __shared__ int warp_count[kRouteWarps];
  __shared__ float total;
  const int64_t nE = a.n_expert, k = a.k, G = a.n_groups > 1 ? a.n_groups : 1;
  float* prob = reinterpret_cast<float*>(smem);      // [nE]
  float* choice = prob + nE;                         // [nE]
  float* gs = choice + nE;                           // [G] group scores
  int32_t* sel = reinterpret_cast<int32_t*>(gs + G); // [k] the selected ids, ascending
  unsigned char* gkeep = reinterpret_cast<unsigned char*>(sel + k);  // [G]
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t t = blockIdx.x;
  const float* z = a.logits + t * nE;

  // Gating probabilities. softmax: exp(z - max) in double rounded to float, the sum on one thread in
  // expert order (the host's order: a tree sum would round differently), then the divisions.
  if (a.softmax) {
    float mx = -INFINITY;
    for (int64_t e = tid; e < nE; e += kRouteThreads) mx = fmaxf(mx, z[e]);
    mx = cta_max(mx, red);
    for (int64_t e = tid; e < nE; e += kRouteThreads) prob[e] = (float)exp((double)__fsub_rn(z[e], mx));
    __syncthreads();
    if (tid == 0) {
      float s = 0.f;
#pragma unroll 8
      for (int64_t e = 0; e < nE; ++e) s = __fadd_rn(s, prob[e]);
      total = s;
    }
    __syncthreads();
    const float s = total;
    for (int64_t e = tid; e < nE; e += kRouteThreads) prob[e] = __fdiv_rn(prob[e], s);
  } else {
    for (int64_t e = tid; e < nE; e += kRouteThreads) prob[e] = __fdiv_rn(1.0f, __fadd_rn(1.0f, (float)exp(-(double)z[e])));
  }
  for (int64_t e = tid; e < nE; e += kRouteThreads) choice[e] = __fadd_rn(prob[e], a.bias ? a.bias[e] : 0.f);
  __syncthreads();

  if (G > 1) {  // group limit: a group's score is the sum of its two best choices (the host sorts; we merge)
    const int64_t per = nE / G;
    for (int64_t g = warp; g < G; g += kRouteWarps) {  // a warp per group
      float m1 = -INFINITY, m2 = -INFINITY;
      for (int64_t e = g * per + lane; e < (g + 1) * per; e += 32) top2_merge(m1, m2, choice[e], -INFINITY);
      for (int o = 16; o > 0; o >>= 1) {
        const float b1 = __shfl_xor_sync(0xffffffffu, m1, o), b2 = __shfl_xor_sync(0xffffffffu, m2, o);
        top2_merge(m1, m2, b1, b2);
      }
      if (lane == 0) gs[g] = __fadd_rn(m1, per > 1 ? m2 : 0.f);
    }
    __syncthreads();
    for (int64_t g = tid; g < G; g += kRouteThreads) gkeep[g] = stable_desc_rank(gs, G, g) < a.groups_used;
    __syncthreads();
    for (int64_t e = tid; e < nE; e += kRouteThreads)
      if (!gkeep[e / per]) choice[e] = -INFINITY;
    __syncthreads();
  }

  // The k best choices, ties to the lower id: e is selected when its place in a stable descending sort
  // of the choices is below k (exactly k such places without NaN). The selected ids in ascending order,
  // by a CTA scan of the flags. sel starts as 0..k-1 and writes stay below k, so that NaN choices (no
  // order: more or fewer than k places below k) still give valid ids.
  for (int64_t j = tid; j < k; j += kRouteThreads) sel[j] = (int32_t)j;
  __syncthreads();
  int64_t base_out = 0;
  for (int64_t base = 0; base < nE; base += kRouteThreads) {
    const int64_t e = base + tid;
    bool picked = false;
    if (e < nE) picked = stable_desc_rank(choice, nE, e) < k;
    const unsigned ballot = __ballot_sync(0xffffffffu, picked);
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int64_t before = base_out;
    for (int w = 0; w < warp; ++w) before += warp_count[w];
    const int64_t at = before + __popc(ballot & ((1u << lane) - 1u));
    if (picked && at < k) sel[at] = (int32_t)e;
    for (int w = 0; w < kRouteWarps; ++w) base_out += warp_count[w];
    __syncthreads();  // warp_count is rewritten by the next chunk
  }

  // Weights: the selected probabilities' sum on one thread in slot order (the host's), then each slot.
  if (tid == 0) {
    float s = 0.f;
    for (int64_t j = 0; j < k; ++j) s = __fadd_rn(s, prob[sel[j]]);
    total = s;
  }
  __syncthreads();
  const float denom = __fadd_rn(total, 1e-20f);
  for (int64_t j = tid; j < k; j += kRouteThreads) {
    float wv = prob[sel[j]];
    if (a.norm) wv = __fdiv_rn(wv, denom);
    a.ids[t * k + j] = sel[j];
    a.wts[t * k + j] = __fmul_rn(wv, a.scale);
    a.tok[t * k + j] = (int32_t)t;
  }
  if (a.shared_tail && t == 0 && tid == 0) a.ids[a.T * k] = -1;
}

// group_pairs (api.h), one CTA. Pair j's slot is its place in a stable sort by expert id: the pairs of lower
// ids plus the pairs of its id before it (as the selections above: a rank, so no sort runs). Its expert's slots
// are [r0, r1) = [lower, lower + equal); a group starts at r0 and at every fourth slot from 2 floor(r0 / 2) on.
// Groups are numbered in slot order by a CTA-wide exclusive scan of the starts (one chunk of slots per thread).
constexpr int kGroupThreads = 1024;
__global__ void group_pairs_kernel(const int32_t* __restrict__ ids, const int32_t* __restrict__ tok, int n, int32_t* __restrict__ ord,
                                   int32_t* __restrict__ tok_sorted, int4* __restrict__ groups, int32_t* __restrict__ n_groups) {
  __shared__ int32_t sid[kGroupPairsMax], gexp[kGroupPairsMax], gend[kGroupPairsMax];
  __shared__ uint8_t gstart[kGroupPairsMax];
  __shared__ int32_t part[kGroupThreads];
  const int tid = threadIdx.x;
  for (int i = tid; i < n; i += kGroupThreads) sid[i] = ids[i];
  __syncthreads();
  for (int j = tid; j < n; j += kGroupThreads) {
    const int32_t e = sid[j];
    int lower = 0, before = 0, equal = 0;
    for (int i = 0; i < n; ++i) {
      const int32_t v = sid[i];
      lower += v < e;
      equal += v == e;
      before += v == e && i < j;
    }
    const int s = lower + before, r0 = lower, r1 = lower + equal, p0 = 2 * (r0 >> 1);
    ord[s] = j;
    tok_sorted[s] = tok[j];
    const bool start = s == r0 || ((s & 1) == 0 && ((s - p0) & 3) == 0);
    gstart[s] = start;
    gexp[s] = e;
    gend[s] = min(r1, p0 + 4 * ((s - p0) / 4 + 1));
  }
  __syncthreads();
  const int per = (n + kGroupThreads - 1) / kGroupThreads, lo = tid * per, hi = min(n, lo + per);
  int cnt = 0;
  for (int s2 = lo; s2 < hi; ++s2) cnt += gstart[s2];
  part[tid] = cnt;
  __syncthreads();
  if (tid == 0) {
    int run = 0;
    for (int i = 0; i < kGroupThreads; ++i) {
      const int c = part[i];
      part[i] = run;
      run += c;
    }
    *n_groups = run;
  }
  __syncthreads();
  int g = part[tid];
  for (int s2 = lo; s2 < hi; ++s2)
    if (gstart[s2]) groups[g++] = make_int4(gexp[s2], s2, gend[s2], 0);
}

}  // namespace

void group_pairs(const int32_t* d_ids, const int32_t* d_tok, int64_t n, int32_t* d_ord, int32_t* d_tok_sorted, int32_t* d_groups,
                 int32_t* d_n_groups) {
  if (n < 0 || n > kGroupPairsMax) throw InputError("cuda::group_pairs: " + std::to_string(n) + " pairs (at most " + std::to_string(kGroupPairsMax) + ")");
  if (reinterpret_cast<uintptr_t>(d_groups) % 16) throw InputError("cuda::group_pairs: groups not 16-byte aligned");
  group_pairs_kernel<<<1, kGroupThreads, 0, cur_stream()>>>(d_ids, d_tok, (int)n, d_ord, d_tok_sorted, reinterpret_cast<int4*>(d_groups),
                                                            d_n_groups);
  MLACONF_CUDA_LAUNCH_CHECK("group_pairs_kernel");
}

void route_experts(const RouteArgs& a) {
  check_route_args(a);
  if (a.T == 0) return;
  const int64_t G = a.n_groups > 1 ? a.n_groups : 1;
  const size_t smem = (size_t)(2 * a.n_expert + G + a.k) * 4 + (size_t)G;
  if (smem > 48 * 1024) throw NotSupported("cuda::route_experts: " + std::to_string(a.n_expert) + " experts");
  if (a.T > INT32_MAX) throw NotSupported("cuda::route_experts: more than 2^31 rows");
  route_kernel<<<(unsigned)a.T, kRouteThreads, smem, cur_stream()>>>(a);
  MLACONF_CUDA_LAUNCH_CHECK("route_kernel");
}

}  // namespace mlaconf::cuda
