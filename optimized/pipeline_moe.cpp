// mlaconf optimized: the MoE block of a layer: routing, the experts, the weighted combine.
#include "optimized/pipeline_impl.h"

namespace mlaconf::cuda {

// The routing arguments of layer l's router (the outputs and logits left for the caller).
RouteArgs Pipeline::Impl::route_args(int64_t l, bool on_device) const {
  const DevTensor& bias = L(l, wname::kExpProbsB);
  RouteArgs a;
  a.n_expert = c.n_expert, a.k = c.n_expert_used;
  a.bias = bias.host_f32.empty() ? nullptr : on_device ? bias.buf.as<float>() : bias.host_f32.data();
  a.softmax = c.gating == GatingFunc::Softmax;
  a.n_groups = c.n_expert_groups, a.groups_used = c.n_group_used;
  a.norm = c.expert_weights_norm, a.scale = (float)c.expert_weights_scale;
  return a;
}

Pipeline::Impl::Route Pipeline::Impl::route(int64_t l, const std::vector<float>& lg, int64_t T) const {
  const int64_t nE = c.n_expert, k = c.n_expert_used;
  Route r;
  r.ids.assign(T * k, 0);
  r.wts.assign(T * k, 0.f);
  r.gap.assign(T, std::numeric_limits<double>::infinity());
  r.probs.assign(T * nE, 0.f);
  RouteArgs a = route_args(l, false);
  a.logits = lg.data(), a.T = T, a.ids = r.ids.data(), a.wts = r.wts.data();
  route_experts_host(a, r.gap.data(), r.probs.data());
  return r;
}

void Pipeline::Impl::route_weights(int64_t l, Route& r, int64_t T) const {
  RouteArgs a = route_args(l, false);
  a.T = T, a.ids = r.ids.data(), a.wts = r.wts.data();
  route_weights_host(a, r.probs.data());
}

// Every (token, slot) pair of a decode step in one GEMV launch per matrix, the experts picked on the
// device (gemv_experts): ids [T, k] expert ids, tok [T, k] each pair's token row. Each pair's product is
// the one the per-expert loop of experts() computes (the same weights, x and kernel), so a row does not
// depend on the other rows.
// with_shared (one token, shared_as_entry): ids [k + 1] ends with -1, the shared expert, whose output is eo's
// row k.
void Pipeline::Impl::expert_pairs(int64_t l, const float* y, int64_t T, const int32_t* d_ids, const int32_t* d_tok, float* eo,
                                  bool with_shared) {
  const int64_t E = c.n_embd, k = c.n_expert_used, F = c.n_ff_exp, n = T * k + (with_shared ? 1 : 0);
  if (with_shared && T != 1) throw std::logic_error("expert_pairs: the shared expert as an entry needs one token");
  const DevTensor &gw = L(l, wname::kGateExps), &uw = L(l, wname::kUpExps), &dw = L(l, wname::kDownExps);
  const void *gs = nullptr, *us = nullptr, *ds = nullptr;
  if (with_shared)
    gs = L(l, wname::kGateShexp).buf.get(), us = L(l, wname::kUpShexp).buf.get(), ds = L(l, wname::kDownShexp).buf.get();
  auto ge = fbuf(n * F), ue = fbuf(n * F);
  // Several tokens, most experts picked more than once (group_experts): the pairs sorted by expert into slots,
  // each expert's slots in shared passes (gemv_experts_grouped), its weights decoded once for up to 4 of them.
  // The same bits as by pair (each product is that x on that matrix alone); gate and up in slot order, the down
  // back in pair order.
  if (!with_shared && T > 1 && group_experts(T * k) && n <= kGroupPairsMax && experts_on_mma(l)) {
    DeviceBuffer ord = tbuf((size_t)n * 4), toks = tbuf((size_t)n * 4), grp = tbuf((size_t)n * 16), ng = tbuf(4);
    group_pairs(d_ids, d_tok, n, ord.as<int32_t>(), toks.as<int32_t>(), grp.as<int32_t>(), ng.as<int32_t>());
    auto xe = fbuf(n * E);
    gather_rows(y, E, toks.as<int32_t>(), n, E, xe.as<float>(), E);
    const int32_t *g = grp.as<int32_t>(), *cnt = ng.as<int32_t>();
    gemv_experts_grouped(gw.type, gw.buf.get(), gw.ne1 * gw.row_bytes, gw.ne1, gw.ne0, g, cnt, n, xe.as<float>(), E, ge.as<float>(),
                         F, nullptr, opt.gemv);
    gemv_experts_grouped(uw.type, uw.buf.get(), uw.ne1 * uw.row_bytes, uw.ne1, uw.ne0, g, cnt, n, xe.as<float>(), E, ue.as<float>(),
                         F, nullptr, opt.gemv);
    silu_gate(ge.as<float>(), ue.as<float>(), n * F, ge.as<float>());
    gemv_experts_grouped(dw.type, dw.buf.get(), dw.ne1 * dw.row_bytes, dw.ne1, dw.ne0, g, cnt, n, ge.as<float>(), F, eo, E,
                         ord.as<int32_t>(), opt.gemv);
    return;
  }
  // One token: every pair's x is y itself, read in place (x stride 0) instead of gathered into k copies;
  // the GEMVs read the same values (their arithmetic does not depend on where x lies), so the same bits.
  DeviceBuffer xe;
  const float* xp = y;
  int64_t xs = 0;
  if (T > 1) {
    xe = fbuf(n * E);
    gather_rows(y, E, d_tok, n, E, xe.as<float>(), E);
    xp = xe.as<float>(), xs = E;
  }
  gemv_experts(gw.type, gw.buf.get(), gw.ne1 * gw.row_bytes, d_ids, n, gw.ne1, gw.ne0, xp, xs, ge.as<float>(), F, gs, opt.gemv);
  gemv_experts(uw.type, uw.buf.get(), uw.ne1 * uw.row_bytes, d_ids, n, uw.ne1, uw.ne0, xp, xs, ue.as<float>(), F, us, opt.gemv);
  silu_gate(ge.as<float>(), ue.as<float>(), n * F, ge.as<float>());
  gemv_experts(dw.type, dw.buf.get(), dw.ne1 * dw.row_bytes, d_ids, n, dw.ne1, dw.ne0, ge.as<float>(), F, eo, E, ds, opt.gemv);
}

void Pipeline::Impl::experts(int64_t l, const float* y, int64_t T, const std::vector<int32_t>& ids, float* eo) {
  const int64_t E = c.n_embd, nE = c.n_expert, k = c.n_expert_used, F = c.n_ff_exp;
  // Group the (token, slot) pairs by expert and run each expert once over its tokens.
  std::vector<std::vector<int32_t>> tok(nE), slot(nE);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      tok[ids[t * k + j]].push_back((int32_t)t);
      slot[ids[t * k + j]].push_back((int32_t)(t * k + j));
    }
  const DevTensor &gw = L(l, wname::kGateExps), &uw = L(l, wname::kUpExps), &dw = L(l, wname::kDownExps);
  PinnedUpload& up = uploads[(size_t)cur];
  up.clear();
  int64_t max_n = 0;
  for (auto& v : tok) max_n = std::max<int64_t>(max_n, v.size());
  auto xe = fbuf(max_n * E), ge = fbuf(max_n * F), ue = fbuf(max_n * F), de = fbuf(max_n * E);
  // Every used expert's token and slot lists in one upload (not two synchronous copies per expert).
  std::vector<size_t> o_tok(nE), o_slot(nE);
  for (int64_t e = 0; e < nE; ++e)
    if (!tok[e].empty()) o_tok[e] = up.add(tok[e].data(), tok[e].size() * 4), o_slot[e] = up.add(slot[e].data(), slot[e].size() * 4);
  auto lists = upload_temp(up);
  for (int64_t e = 0; e < nE; ++e) {
    const int64_t n = tok[e].size();
    if (n == 0) continue;
    const int32_t* d_tok = reinterpret_cast<const int32_t*>(lists.as<char>() + o_tok[e]);
    const int32_t* d_slot = reinterpret_cast<const int32_t*>(lists.as<char>() + o_slot[e]);
    gather_rows(y, E, d_tok, n, E, xe.as<float>(), E);
    linear(gw, xe.as<float>(), n, ge.as<float>(), e);
    linear(uw, xe.as<float>(), n, ue.as<float>(), e);
    silu_gate(ge.as<float>(), ue.as<float>(), n * F, ge.as<float>());
    linear(dw, ge.as<float>(), n, de.as<float>(), e);
    scatter_rows(de.as<float>(), E, d_slot, n, E, eo, E);
  }
}

// Router in fp32 (GPU logits, host selection; decode steps of a pass over sequences: device selection),
// tokens grouped per expert, expert GEMMs, weighted combine.
void Pipeline::Impl::moe(int64_t l, const float* y, int64_t T, float* out, float* residual) {
  const int64_t E = c.n_embd, nE = c.n_expert, k = c.n_expert_used;
  auto logits = fbuf(T * nE);
  router_logits(l, y, T, logits.as<float>());
  done(l, op::kRouterLogits, logits.as<float>(), {T, nE});
  // A decode step of a pass over sequences (direct or a CUDA graph; no trace, no forced decisions): the
  // routing on the device (route_experts: the host's selection and weights, bit for bit), so that the
  // step never waits for the host (the host routing reads the logits back: one synchronization per MoE
  // layer, after which the device idles until the host has routed and queued the experts).
  if (sr && all_gemv) {
    const bool fold = shared_as_entry(l, T);  // the shared expert as entry k (id -1) of the experts' launches
    const int64_t n = T * k + (fold ? 1 : 0);
    DeviceBuffer d_ids = tbuf((size_t)n * 4), d_wts = tbuf((size_t)(T * k) * 4), d_tok = tbuf((size_t)(T * k) * 4);
    RouteArgs ra = route_args(l, true);
    ra.logits = logits.as<float>(), ra.T = T;
    ra.ids = d_ids.as<int32_t>(), ra.wts = d_wts.as<float>(), ra.tok = d_tok.as<int32_t>();
    ra.shared_tail = fold;  // id -1 after the routed ones
    route_experts(ra);
    auto eo = fbuf(n * E);
    expert_pairs(l, y, T, d_ids.as<int32_t>(), d_tok.as<int32_t>(), eo.as<float>(), fold);
    done(l, op::kExpertOut, eo.as<float>(), {T, k, E});
    DeviceBuffer sh;
    const float* shp = nullptr;
    if (fold) {
      shp = eo.as<float>() + T * k * E;
      done(l, op::kSharedExpertOut, shp, {T, E});
    } else if (c.n_expert_shared > 0) {
      sh = fbuf(T * E);
      shared_expert(l, y, T, sh.as<float>());
      done(l, op::kSharedExpertOut, sh.as<float>(), {T, E});
      shp = sh.as<float>();
    }
    weighted_combine(eo.as<float>(), d_wts.as<float>(), T, k, E, shp, out, residual);
    return;
  }
  std::vector<float> lg(T * nE);
  copy_to_host(lg.data(), logits.get(), lg.size() * 4);
  Route r = route(l, lg, T);
  if (wants(l, op::kRouterIds)) tr->record_i32((int)l, op::kRouterIds, r.ids.data(), {T, k});  // ours, also when forced
  force_experts(l, T, r);  // forced expert ids replace ours, with their own weights (the gap recorded below stays ours)
  if (wants(l, op::kRouterWeights)) {
    auto d = to_double(r.wts);
    tr->record((int)l, op::kRouterWeights, d.data(), {T, k});
  }
  if (wants(l, op::kRouterTopkGap)) tr->record((int)l, op::kRouterTopkGap, r.gap.data(), {T});

  auto eo = fbuf(T * k * E);
  experts(l, y, T, r.ids, eo.as<float>());
  done(l, op::kExpertOut, eo.as<float>(), {T, k, E});
  DeviceBuffer sh;
  if (c.n_expert_shared > 0) {
    sh = fbuf(T * E);
    shared_expert(l, y, T, sh.as<float>());
    done(l, op::kSharedExpertOut, sh.as<float>(), {T, E});
  }
  combine(eo.as<float>(), r.wts, sh.get() ? sh.as<float>() : nullptr, T, out, residual);
}

bool Pipeline::Impl::shared_as_entry(int64_t l, int64_t T) const {
  if (T != 1 || c.n_expert_shared != 1) return false;
  const DevTensor &gw = L(l, wname::kGateExps), &uw = L(l, wname::kUpExps), &dw = L(l, wname::kDownExps);
  const DevTensor &gs = L(l, wname::kGateShexp), &us = L(l, wname::kUpShexp), &ds = L(l, wname::kDownShexp);
  auto same = [](const DevTensor& e, const DevTensor& s) {
    return e.type == s.type && e.ne0 == s.ne0 && e.ne1 == s.ne1 && e.row_bytes == s.row_bytes && mma_aligned(s);
  };
  return same(gw, gs) && same(uw, us) && same(dw, ds) && experts_on_mma(l);
}

bool Pipeline::Impl::experts_on_mma(int64_t l) const {
  for (const char* n : {wname::kGateExps, wname::kUpExps, wname::kDownExps}) {
    const DevTensor& t = L(l, n);
    if (!gemv_experts_mma_ok(t.type, t.ne1, t.ne0, opt.gemv) || !mma_aligned(t)) return false;
  }
  return true;
}

void Pipeline::Impl::shared_expert(int64_t l, const float* y, int64_t T, float* sh) {
  const int64_t Fs = L(l, wname::kGateShexp).ne1;
  auto g = fbuf(T * Fs), u = fbuf(T * Fs);
  linear(L(l, wname::kGateShexp), y, T, g.as<float>());
  linear(L(l, wname::kUpShexp), y, T, u.as<float>());
  silu_gate(g.as<float>(), u.as<float>(), T * Fs, g.as<float>());
  linear(L(l, wname::kDownShexp), g.as<float>(), T, sh);
}

void Pipeline::Impl::combine(const float* eo, const std::vector<float>& wts, const float* sh, int64_t T, float* out, float* residual) {
  PinnedUpload& up = uploads[(size_t)cur];
  up.clear();
  up.add(wts.data(), wts.size() * 4);
  auto d_w = upload_temp(up);
  weighted_combine(eo, d_w.as<float>(), T, c.n_expert_used, c.n_embd, sh, out, residual);
}

}  // namespace mlaconf::cuda
