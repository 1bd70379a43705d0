// mlaconf optimized: MoE routing on the device, for a decode step captured in a CUDA graph (the host
// routing in pipeline.cpp synchronizes: it reads the router logits back). The very same float
// operations as the host's, in the same order, so that both select the same experts with the same
// weights bit for bit (exp is computed in double and rounded to float on both sides).
#include <cmath>

#include "core/error.h"
#include "optimized/api.h"
#include "optimized/common.cuh"

namespace mlaconf::cuda {
namespace {

// One CTA per row; its first thread runs the selection (n_expert is a few hundred: sequential is fine).
__global__ void route_kernel(RouteArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t nE = a.n_expert, k = a.k, G = a.n_groups;
  float* prob = reinterpret_cast<float*>(smem);
  float* choice = prob + nE;
  float* gs = choice + nE;
  unsigned char* picked = reinterpret_cast<unsigned char*>(gs + (G > 0 ? G : 1));
  unsigned char* gkeep = picked + nE;
  if (threadIdx.x != 0) return;
  const int64_t t = blockIdx.x;
  const float* z = a.logits + t * nE;
  if (a.softmax) {
    float mx = z[0];
    for (int64_t e = 1; e < nE; ++e)
      if (z[e] > mx) mx = z[e];
    float s = 0;
    for (int64_t e = 0; e < nE; ++e) s += (prob[e] = (float)exp((double)(z[e] - mx)));
    for (int64_t e = 0; e < nE; ++e) prob[e] /= s;
  } else {
    for (int64_t e = 0; e < nE; ++e) prob[e] = 1.0f / (1.0f + (float)exp(-(double)z[e]));
  }
  for (int64_t e = 0; e < nE; ++e) choice[e] = prob[e] + (a.bias ? a.bias[e] : 0.f);
  if (G > 1) {  // group limit: a group's score is the sum of its two best choices
    const int64_t per = nE / G;
    for (int64_t g = 0; g < G; ++g) {
      // v[0] + v[1] of the group's choices sorted descending: the largest, and the largest of the rest.
      int64_t i1 = g * per;
      for (int64_t e = g * per; e < (g + 1) * per; ++e)
        if (choice[e] > choice[i1]) i1 = e;
      float second = 0.f;
      if (per > 1) {
        int64_t i2 = -1;
        for (int64_t e = g * per; e < (g + 1) * per; ++e)
          if (e != i1 && (i2 < 0 || choice[e] > choice[i2])) i2 = e;
        second = choice[i2];
      }
      gs[g] = choice[i1] + (per > 1 ? second : 0.f);
      gkeep[g] = 0;
    }
    for (int64_t i = 0; i < a.groups_used; ++i) {  // the best groups, ties to the lower group
      int64_t best = -1;
      for (int64_t g = 0; g < G; ++g)
        if (!gkeep[g] && (best < 0 || gs[g] > gs[best])) best = g;
      gkeep[best] = 1;
    }
    for (int64_t e = 0; e < nE; ++e)
      if (!gkeep[e / per]) choice[e] = -INFINITY;
  }
  for (int64_t e = 0; e < nE; ++e) picked[e] = 0;
  for (int64_t i = 0; i < k; ++i) {  // the k best choices, ties to the lower id (a stable sort's prefix)
    int64_t best = -1;
    for (int64_t e = 0; e < nE; ++e)
      if (!picked[e] && (best < 0 || choice[e] > choice[best])) best = e;
    picked[best] = 1;
  }
  int32_t* ids = a.ids + t * k;
  int64_t j = 0;
  for (int64_t e = 0; e < nE && j < k; ++e)
    if (picked[e]) ids[j++] = (int32_t)e;
  float sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += prob[ids[i]];
  for (int64_t i = 0; i < k; ++i) {
    float wv = prob[ids[i]];
    if (a.norm) wv = wv / (sum + 1e-20f);
    a.wts[t * k + i] = wv * a.scale;
    a.tok[t * k + i] = (int32_t)t;
  }
}

}  // namespace

void route_experts(const RouteArgs& a) {
  if (a.n_expert < 1 || a.k < 1 || a.k > a.n_expert || (a.n_groups > 1 && (a.n_expert % a.n_groups || a.groups_used < 1 ||
                                                                           a.groups_used > a.n_groups)))
    throw InputError("cuda::route_experts: bad shape");
  if (a.T == 0) return;
  const int64_t G = a.n_groups > 0 ? a.n_groups : 1;
  const size_t smem = (size_t)(2 * a.n_expert + G) * 4 + (size_t)a.n_expert + (size_t)G;
  if (smem > 48 * 1024) throw InputError("cuda::route_experts: not supported: " + std::to_string(a.n_expert) + " experts");
  route_kernel<<<(unsigned)a.T, 32, smem, cur_stream()>>>(a);
  MLACONF_CUDA_LAUNCH_CHECK("route_kernel");
}

}  // namespace mlaconf::cuda
