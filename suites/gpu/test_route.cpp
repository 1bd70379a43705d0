// suites/gpu: MoE routing on the device (cuda::route_experts, optimized/route.cu: one 256-thread CTA per
// row) against the host routing (cuda::route_experts_host, the pipeline's routing where it records or
// forces decisions), BIT for bit: the same ids (ascending), the same weights (memcmp), tok = the row.
// A decode step routes on the device and must select what the host would (suites/gpu batch.* check it
// end to end; these cases check the routing alone, on inputs built to hit its corners).
//
// Rows cycle through kinds that stress what the parallel kernel could get wrong: random logits; logits
// and biases from small discrete sets (many exact ties of choices, at the k-th place too, and of group
// scores: the bias of a group config repeats with the group size); all logits equal (every choice tied:
// the k lowest ids, or the bias decides); saturated sigmoids (many choices exactly 1); large softmax
// logits (exp underflows to 0). Configurations: GLM-5 (256 experts, top 8, sigmoid, bias, normalised),
// DeepSeek V3 (8 groups of 32, 4 kept), softmax without bias or normalisation, odd groups (20 experts in 4
// groups of 5, per-group size 1), k = n_expert, 300 and 1024 experts (several 256-expert chunks, groups
// larger than a warp), one expert.
//
// Negative controls (the comparison can fail): the host routing of the mirrored experts (ties to the
// HIGHER id) must differ from the device on some row where k < n_expert; for softmax without
// normalisation, weights from a normaliser summed in reverse order must differ in some bit (so a
// parallel tree sum would be caught).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/error.h"
#include "optimized/api.h"
#include "suites/gpu/gpu_test_util.h"

namespace mlaconf::gputest {
namespace {

using test::CaseName;

struct RouteCase {
  const char* name;
  int64_t nE, k, G, used;
  bool softmax, bias, norm;
  float scale;
};

// Row t's kind, (t + 1) % 5 (a single row is a tie-rich one): 0 random, 1 discrete (ties), 2 all equal,
// 3 saturated / large, 4 every group a copy of group 0.
std::vector<float> make_logits(const RouteCase& rc, int64_t T, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 2.f);
  std::uniform_int_distribution<int> level(-2, 2);
  std::uniform_real_distribution<float> wide(-40.f, 40.f);
  const int64_t nE = rc.nE, per = rc.G > 1 ? nE / rc.G : nE;
  std::vector<float> z((size_t)(T * nE));
  for (int64_t t = 0; t < T; ++t) {
    float* row = z.data() + t * nE;
    switch ((t + 1) % 5) {
      case 0:
        for (int64_t e = 0; e < nE; ++e) row[e] = normal(rng);
        break;
      case 1:
        for (int64_t e = 0; e < nE; ++e) row[e] = 0.5f * (float)level(rng);
        break;
      case 2:
        for (int64_t e = 0; e < nE; ++e) row[e] = 0.3f;
        break;
      case 3:
        for (int64_t e = 0; e < nE; ++e) row[e] = wide(rng);
        break;
      default:
        for (int64_t e = 0; e < nE; ++e) row[e] = e < per ? 0.5f * (float)level(rng) : row[e % per];
        break;
    }
  }
  return z;
}
// Bias from four levels, repeating with the group size (equal groups tie exactly).
std::vector<float> make_bias(const RouteCase& rc, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> level(0, 3);
  const int64_t per = rc.G > 1 ? rc.nE / rc.G : rc.nE;
  std::vector<float> b((size_t)rc.nE);
  for (int64_t e = 0; e < rc.nE; ++e) b[(size_t)e] = e < per ? 0.0625f * (float)level(rng) - 0.1f : b[(size_t)(e % per)];
  return b;
}

cuda::RouteArgs args_of(const RouteCase& rc, int64_t T) {
  cuda::RouteArgs a;
  a.T = T, a.n_expert = rc.nE, a.k = rc.k;
  a.softmax = rc.softmax;
  a.n_groups = rc.G, a.groups_used = rc.used;
  a.norm = rc.norm, a.scale = rc.scale;
  return a;
}

struct Routed {
  std::vector<int32_t> ids, tok;
  std::vector<float> wts;
};
Routed host_route(const RouteCase& rc, const std::vector<float>& z, const std::vector<float>& bias, int64_t T) {
  Routed r;
  r.ids.assign((size_t)(T * rc.k), -7), r.tok.assign((size_t)(T * rc.k), -7), r.wts.assign((size_t)(T * rc.k), NAN);
  cuda::RouteArgs a = args_of(rc, T);
  a.logits = z.data(), a.bias = rc.bias ? bias.data() : nullptr;
  a.ids = r.ids.data(), a.wts = r.wts.data(), a.tok = r.tok.data();
  cuda::route_experts_host(a);
  return r;
}
// shared_tail: ids gets one more slot, returned as the last of r.ids.
Routed device_route(const RouteCase& rc, const std::vector<float>& z, const std::vector<float>& bias, int64_t T,
                    double* us_per_call = nullptr, bool shared_tail = false) {
  auto d_z = cuda::to_device(z), d_b = cuda::to_device(bias);
  const int64_t n_ids = T * rc.k + (shared_tail ? 1 : 0);
  cuda::DeviceBuffer d_ids((size_t)n_ids * 4), d_wts((size_t)(T * rc.k) * 4), d_tok((size_t)(T * rc.k) * 4);
  cuda::RouteArgs a = args_of(rc, T);
  a.logits = d_z.as<float>(), a.bias = rc.bias ? d_b.as<float>() : nullptr;
  a.ids = d_ids.as<int32_t>(), a.wts = d_wts.as<float>(), a.tok = d_tok.as<int32_t>();
  a.shared_tail = shared_tail;
  cuda::route_experts(a);
  cuda::synchronize();
  if (us_per_call) {  // launch + kernel, back to back (informational: the kernel was 155 us at 256 experts)
    constexpr int kReps = 200;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) cuda::route_experts(a);
    cuda::synchronize();
    *us_per_call = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kReps;
  }
  Routed r;
  r.ids = cuda::to_host<int32_t>(d_ids, (size_t)n_ids);
  r.wts = cuda::to_host<float>(d_wts, (size_t)(T * rc.k));
  r.tok = cuda::to_host<int32_t>(d_tok, (size_t)(T * rc.k));
  return r;
}

// Rows (of T) whose ids differ, and weights differing in any bit.
int64_t rows_differ(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int64_t T, int64_t k) {
  int64_t n = 0;
  for (int64_t t = 0; t < T; ++t) n += std::memcmp(a.data() + t * k, b.data() + t * k, (size_t)k * 4) != 0;
  return n;
}
int64_t weights_differ(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], 4) != 0;
  return n;
}

void route_case(const RouteCase& rc, int64_t T) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(4242 + (uint64_t)rc.nE * 31 + (uint64_t)rc.k * 7 + (uint64_t)T);
  const std::vector<float> z = make_logits(rc, T, rng), bias = make_bias(rc, rng);
  const Routed want = host_route(rc, z, bias, T);
  double us = 0;
  const Routed got = device_route(rc, z, bias, T, &us);
  std::printf("  route_experts %s T=%lld: %.2f us per call (launch + kernel)\n", rc.name, (long long)T, us);

  const int64_t k = rc.k;
  EXPECT_EQ(rows_differ(got.ids, want.ids, T, k), 0) << "rows whose selected experts differ from the host's";
  EXPECT_EQ(weights_differ(got.wts, want.wts), 0) << "weights that differ from the host's in some bit";
  for (int64_t i = 0; i < T * k; ++i) {
    ASSERT_EQ(got.tok[(size_t)i], (int32_t)(i / k)) << "tok of pair " << i;
    if (i % k) {
      ASSERT_LT(got.ids[(size_t)i - 1], got.ids[(size_t)i]) << "ids not ascending at pair " << i;
    }
  }

  // Negative control 1: ties to the higher id (the host routing of the mirrored experts, ids mapped
  // back) selects differently on some row, so a tie-rule bug would show. Where something is left out
  // and every kind of row is there (T >= 5).
  if (k < rc.nE && T >= 5) {
    std::vector<float> zm(z.size()), bm(bias.size());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < rc.nE; ++e) zm[(size_t)(t * rc.nE + e)] = z[(size_t)(t * rc.nE + rc.nE - 1 - e)];
    for (int64_t e = 0; e < rc.nE; ++e) bm[(size_t)e] = bias[(size_t)(rc.nE - 1 - e)];
    Routed mir = host_route(rc, zm, bm, T);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < k; ++j) mir.ids[(size_t)(t * k + j)] = (int32_t)(rc.nE - 1) - mir.ids[(size_t)(t * k + j)];
      std::sort(mir.ids.begin() + t * k, mir.ids.begin() + (t + 1) * k);
    }
    EXPECT_GT(rows_differ(got.ids, mir.ids, T, k), 0) << "negative control: ties to the higher id went unnoticed";
  }
  // Negative control 2: softmax without normalisation (weight = probability * scale): the normaliser
  // summed in expert order reproduces the device's weights, summed in reverse order it changes some
  // weight's bits (so a tree sum would be caught).
  if (rc.softmax && !rc.norm && T >= 5) {
    std::vector<float> fwd(got.wts.size()), rev(got.wts.size());
    for (int64_t t = 0; t < T; ++t) {
      const float* row = z.data() + t * rc.nE;
      const float mx = *std::max_element(row, row + rc.nE);
      float sf = 0, sr = 0;
      for (int64_t e = 0; e < rc.nE; ++e) sf += (float)std::exp((double)(row[e] - mx));
      for (int64_t e = rc.nE - 1; e >= 0; --e) sr += (float)std::exp((double)(row[e] - mx));
      for (int64_t j = 0; j < k; ++j) {
        const float p = (float)std::exp((double)(row[got.ids[(size_t)(t * k + j)]] - mx));
        fwd[(size_t)(t * k + j)] = p / sf * rc.scale;
        rev[(size_t)(t * k + j)] = p / sr * rc.scale;
      }
    }
    EXPECT_EQ(weights_differ(got.wts, fwd), 0) << "the control's own sum in expert order";
    EXPECT_GT(weights_differ(got.wts, rev), 0) << "negative control: a normaliser summed in another order went unnoticed";
  }
}

// The shared expert's id -1 after the routed ids (RouteArgs::shared_tail, a one-token step's experts launch), written
// by the routing's launch over the buffer's poison; the routed ids as without it.
void shared_tail_case(const RouteCase& rc, int64_t T) {
  MLACONF_REQUIRE_CUDA();
  std::mt19937_64 rng(99 + (uint64_t)T);
  const std::vector<float> z = make_logits(rc, T, rng), bias = make_bias(rc, rng);
  const Routed plain = device_route(rc, z, bias, T), tail = device_route(rc, z, bias, T, nullptr, true);
  ASSERT_EQ(tail.ids.size(), plain.ids.size() + 1);
  EXPECT_EQ(tail.ids.back(), -1) << "the shared expert's id";
  EXPECT_EQ(std::memcmp(tail.ids.data(), plain.ids.data(), plain.ids.size() * 4), 0) << "the routed ids changed";
  EXPECT_EQ(weights_differ(tail.wts, plain.wts), 0);
}

// The shape checks of both entry points.
void route_misuse() {
  MLACONF_REQUIRE_CUDA();
  std::vector<float> z(12, 0.f);
  std::vector<int32_t> ids(12);
  std::vector<float> w(12);
  cuda::RouteArgs a;
  a.logits = z.data(), a.T = 1, a.n_expert = 12, a.ids = ids.data(), a.wts = w.data();
  a.k = 13;
  EXPECT_THROW(cuda::route_experts_host(a), InputError) << "k > n_expert";
  EXPECT_THROW(cuda::route_experts(a), InputError) << "k > n_expert";
  a.k = 2, a.n_groups = 5, a.groups_used = 1;
  EXPECT_THROW(cuda::route_experts_host(a), InputError) << "5 groups do not divide 12 experts";
  a.n_groups = 4, a.groups_used = 5;
  EXPECT_THROW(cuda::route_experts(a), InputError) << "groups_used > n_groups";
}

const bool registered = [] {
  static const RouteCase kCases[] = {
      {"glm5", 256, 8, 1, 1, false, true, true, 2.5f},
      {"dsv3", 256, 8, 8, 4, false, true, true, 2.5f},
      {"softmax_plain", 64, 6, 1, 1, true, false, false, 1.f},
      {"odd_groups", 20, 3, 4, 2, true, true, true, 1.f},
      {"groups_of_one", 8, 2, 8, 3, false, false, true, 1.f},
      {"k_all", 16, 16, 1, 1, true, true, true, 1.f},
      {"e300", 300, 7, 3, 2, true, true, false, 1.5f},
      {"e1024", 1024, 8, 16, 3, false, true, true, 2.5f},
      {"e1", 1, 1, 1, 1, true, false, true, 1.f},
  };
  for (const RouteCase& rc : kCases)
    for (int64_t T : {1, 67}) {
      const std::string name = CaseName("route_experts")
                                   .p("config", rc.name)
                                   .p("experts", rc.nE)
                                   .p("k", rc.k)
                                   .p("groups", rc.G)
                                   .p("groups_used", rc.used)
                                   .p("gating", rc.softmax ? "softmax" : "sigmoid")
                                   .p("bias", (int)rc.bias)
                                   .p("norm", (int)rc.norm)
                                   .p("rows", T)
                                   .str();
      register_case("route", name, [rc, T] { route_case(rc, T); });
    }
  register_case("route", CaseName("route_experts_misuse").str(), [] { route_misuse(); });
  for (int64_t T : {1, 3})
    register_case("route", CaseName("route_experts_shared_tail").p("config", "glm5").p("rows", T).str(),
                  [T] { shared_tail_case(kCases[0], T); });
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
