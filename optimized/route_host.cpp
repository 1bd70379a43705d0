// mlaconf optimized: MoE routing on the host (api.h: route_experts_host), the pipeline's routing where it
// records or forces decisions. optimized/route.cu runs the same selection on the device: every float
// operation here has its twin there, in the same order, so that both give the same bits; change them
// together (suites/gpu route_experts.* compares them).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "optimized/api.h"

namespace mlaconf::cuda {

void check_route_args(const RouteArgs& a) {
  if (a.n_expert < 1 || a.k < 1 || a.k > a.n_expert || a.T < 0 ||
      (a.n_groups > 1 && (a.n_expert % a.n_groups || a.groups_used < 1 || a.groups_used > a.n_groups)))
    throw InputError("cuda::route_experts: bad shape");
}

void route_experts_host(const RouteArgs& a, double* gap, float* probs) {
  check_route_args(a);
  const int64_t nE = a.n_expert, k = a.k;
  std::vector<float> choice(nE), own_probs(probs ? 0 : nE);
  for (int64_t t = 0; t < a.T; ++t) {
    float* prob = probs ? probs + t * nE : own_probs.data();
    const float* z = a.logits + t * nE;
    if (a.softmax) {
      const float mx = *std::max_element(z, z + nE);
      float s = 0;
      // exp in double, rounded to float (the device computes it so too); the sum in expert order.
      for (int64_t e = 0; e < nE; ++e) s += (prob[e] = (float)std::exp((double)(z[e] - mx)));
      for (int64_t e = 0; e < nE; ++e) prob[e] /= s;
    } else {
      for (int64_t e = 0; e < nE; ++e) prob[e] = 1.0f / (1.0f + (float)std::exp(-(double)z[e]));
    }
    for (int64_t e = 0; e < nE; ++e) choice[e] = prob[e] + (a.bias ? a.bias[e] : 0.f);
    if (a.n_groups > 1) {  // group limit: a group's score is the sum of its two best choices
      const int64_t G = a.n_groups, per = nE / G;
      std::vector<float> gs(G);
      for (int64_t g = 0; g < G; ++g) {
        std::vector<float> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
        std::sort(v.begin(), v.end(), std::greater<float>());
        gs[g] = v[0] + (per > 1 ? v[1] : 0.f);
      }
      std::vector<int64_t> go(G);
      std::iota(go.begin(), go.end(), 0);
      std::stable_sort(go.begin(), go.end(), [&](int64_t x, int64_t y) { return gs[x] > gs[y]; });
      std::vector<bool> keep(G, false);
      for (int64_t i = 0; i < a.groups_used; ++i) keep[go[i]] = true;
      for (int64_t e = 0; e < nE; ++e)
        if (!keep[e / per]) choice[e] = -std::numeric_limits<float>::infinity();
    }
    std::vector<int32_t> order(nE);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return choice[x] > choice[y]; });
    if (gap) gap[t] = nE > k ? (double)choice[order[k - 1]] - (double)choice[order[k]] : std::numeric_limits<double>::infinity();
    std::vector<int32_t> sel(order.begin(), order.begin() + k);
    std::sort(sel.begin(), sel.end());
    std::copy(sel.begin(), sel.end(), a.ids + t * k);
    if (a.tok) std::fill(a.tok + t * k, a.tok + (t + 1) * k, (int32_t)t);
    RouteArgs row = a;  // this row's weights (its probabilities are in prob)
    row.T = 1, row.ids = a.ids + t * k, row.wts = a.wts + t * k;
    route_weights_host(row, prob);
  }
}

void route_weights_host(const RouteArgs& a, const float* probs) {
  const int64_t nE = a.n_expert, k = a.k;
  for (int64_t t = 0; t < a.T; ++t) {
    float sum = 0;  // in slot order (ids ascending), as the device sums
    for (int64_t j = 0; j < k; ++j) sum += probs[t * nE + a.ids[t * k + j]];
    for (int64_t j = 0; j < k; ++j) {
      float wv = probs[t * nE + a.ids[t * k + j]];
      if (a.norm) wv = wv / (sum + 1e-20f);
      a.wts[t * k + j] = wv * a.scale;
    }
  }
}

}  // namespace mlaconf::cuda
