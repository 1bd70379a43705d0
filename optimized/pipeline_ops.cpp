// mlaconf optimized: the ops of one layer (norms, projections, RoPE, the indexer's parts,
// attention, the MLP), each one piece of logic that layer(), moe() and op replay share; linear(), and each op's
// overflow check and trace record.
#include "optimized/pipeline_impl.h"

namespace mlaconf::cuda {

void Pipeline::Impl::linear(const DevTensor& t, const float* x, int64_t T, float* y, int64_t expert, bool fp32) {
  if (T == 0) return;
  const uint8_t* base = t.buf.as<uint8_t>() + (expert >= 0 ? expert * t.ne1 * t.row_bytes : 0);
  if (T <= opt.gemv_max_tokens || all_gemv || t.type == GgmlType::F32) {
    gemv(t.type, base, t.ne1, t.ne0, x, y, T, 0, t.ne0, t.ne1, opt.gemv);  // F32 weights (the router) stay in fp32
    return;
  }
  if (fp32 || opt.prefill == PipelineOptions::Prefill::Fp32)
    linear_prefill_f32(t.type, base, t.ne1, t.ne0, x, T, y, &deq_scratch[cur]);
  else if (opt.prefill == PipelineOptions::Prefill::Fp16x3)
    linear_prefill_x3(t.type, base, t.ne1, t.ne0, x, T, y, &deq_scratch[cur]);
  else
    linear_prefill(t.type, base, t.ne1, t.ne0, x, T, y, &deq_scratch[cur]);
}

void Pipeline::Impl::check(int64_t layer, const char* name, const float* d, int64_t n) {
  if (!opt.overflow_check) return;
  const int64_t bad = count_nonfinite(d, n);
  if (bad)
    throw OverflowError("overflow: " + std::string(layer < 0 ? "model" : "layer " + std::to_string(layer)) + " op '" + name +
                        "' produced " + std::to_string(bad) + " inf/NaN values of " + std::to_string(n) +
                        " (the first op to overflow)");
}

void Pipeline::Impl::rec(int64_t layer, const char* name, const float* d, const std::vector<int64_t>& shape) {
  if (!wants(layer, name)) return;
  int64_t n = 1;
  for (auto s : shape) n *= s;
  std::vector<float> h(n);
  if (n) copy_to_host(h.data(), d, n * 4);
  auto dd = to_double(h);
  tr->record((int)layer, name, dd.data(), shape);
}

void Pipeline::Impl::done(int64_t layer, const char* name, const float* d, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  check(layer, name, d, n);
  rec(layer, name, d, shape);
}

void Pipeline::Impl::attn_norm(int64_t l, const float* h, int64_t T, float* x) {
  rmsnorm(h, L(l, wname::kAttnNorm).buf.as<float>(), T, c.n_embd, c.n_embd, (float)c.rms_eps, x);
}

void Pipeline::Impl::q_a(int64_t l, const float* x, int64_t T, float* qa) {
  linear(L(l, wname::kQA), x, T, qa);
  if (l == 1 && active_fault() == Fault::InjectOverflow) scale_inplace(qa, 1, INFINITY);
}

void Pipeline::Impl::q_a_norm(int64_t l, const float* qa, int64_t T, float* cq) {
  rmsnorm(qa, L(l, wname::kQANorm).buf.as<float>(), T, c.q_lora_rank, c.q_lora_rank, (float)c.rms_eps, cq);
}

void Pipeline::Impl::q_b(int64_t l, const float* cq, int64_t T, float* qb) {
  linear(L(l, wname::kQB), cq, T, qb);
}

void Pipeline::Impl::q_rope(float* qb, int64_t T, const int32_t* d_pos) {
  rope(qb, T, c.n_head, c.qk_head(), c.qk_nope(), c.qk_rope(), d_pos, c.rope_freq_base, false);
}

void Pipeline::Impl::kv_a(int64_t l, const float* x, int64_t T, float* kva) {
  linear(L(l, wname::kKvA), x, T, kva);
}

void Pipeline::Impl::latent_rows(int64_t l, const float* kva, int64_t T, const int32_t* d_pos, float* lat) {
  const int64_t dl = c.kv_lora_rank, R = c.qk_rope(), dlat = dl + R;
  rmsnorm(kva, L(l, wname::kKvANorm).buf.as<float>(), T, dl, dlat, (float)c.rms_eps, lat);
  copy2d(lat + dl, dlat * 4, kva + dl, dlat * 4, R * 4, T);
  rope(lat, T, 1, dlat, dl, R, d_pos, c.rope_freq_base, false);
}

void Pipeline::Impl::absorb(int64_t l, const float* qb, int64_t T, float* qabs) {
  const int64_t H = c.n_head, dn = c.qk_nope(), R = c.qk_rope(), dq = c.qk_head(), dl = c.kv_lora_rank, dlat = dl + R;
  const DevTensor& kb = L(l, wname::kKB);
  gemv_per_head(kb.type, kb.buf.get(), dl, dn, H, qb, dq, qabs, dlat, T * H, opt.gemv);
  copy2d(qabs + dl, dlat * 4, qb + dn, dq * 4, R * 4, T * H);
}

void Pipeline::Impl::indexer_q_proj(int64_t l, const float* cq, int64_t T, float* qi) {
  linear(L(l, wname::kIdxQB), cq, T, qi, -1, true);
}

void Pipeline::Impl::indexer_q_rope(float* qi, int64_t T, const int32_t* d_pos) {
  rope(qi, T, c.indexer_n_head, c.indexer_head_size, 0, c.qk_rope(), d_pos, c.rope_freq_base, c.indexer_neox());
}

void Pipeline::Impl::indexer_q(int64_t l, const float* cq, int64_t T, const int32_t* d_pos, float* qi) {
  indexer_q_proj(l, cq, T, qi);
  indexer_q_rope(qi, T, d_pos);
}

bool Pipeline::Impl::indexer_k(int64_t l, const float* x, int64_t T, const int32_t* d_pos, float* ki, const int32_t* idx,
               float* dst) {
  const int64_t Di = c.indexer_head_size;
  auto kraw = fbuf(T * Di);
  linear(L(l, wname::kIdxK), x, T, kraw.as<float>(), -1, true);
  const float* nw = L(l, wname::kIdxKNorm).buf.as<float>();
  const float* nb = L(l, wname::kIdxKNormB).buf.as<float>();
  if (opt.indexer_key_fused) {
    layernorm_rope(kraw.as<float>(), nw, nb, T, Di, 1e-6f, d_pos, c.qk_rope(), c.rope_freq_base, c.indexer_neox(), ki, idx, dst, Di);
    return idx != nullptr;
  }
  layernorm(kraw.as<float>(), nw, nb, T, Di, 1e-6f, ki);
  rope(ki, T, 1, Di, 0, c.qk_rope(), d_pos, c.rope_freq_base, c.indexer_neox());
  return false;
}

void Pipeline::Impl::indexer_weights(int64_t l, const float* x, int64_t T, float* wts) {
  linear(L(l, wname::kIdxProj), x, T, wts, -1, true);
}

void Pipeline::Impl::indexer_score_rows(const float* qi, const float* keys, float* wts, const int32_t* d_pos, int64_t T, int64_t Lkv, float* scores) {
  const int64_t Hi = c.indexer_n_head, Di = c.indexer_head_size;
  scale_indexer_weights(wts, T);
  indexer_scores_f32(qi, keys, wts, d_pos, T, Hi, Di, Lkv, scores);
}

void Pipeline::Impl::scale_indexer_weights(float* wts, int64_t T) {
  const int64_t Hi = c.indexer_n_head, Di = c.indexer_head_size;
  scale_inplace(wts, T * Hi, (float)(1.0 / std::sqrt((double)Hi * (double)Di)));
}

void Pipeline::Impl::indexer_select_seq(int64_t l, const float* qi, float* wts, const int32_t* d_pos, int64_t T, int32_t* top) {
  const int64_t Hi = c.indexer_n_head, Di = c.indexer_head_size, K = c.indexer_top_k;
  scale_indexer_weights(wts, T);
  if (sr->graph_shape || ((int64_t)sr->groups.size() == T && T > 1)) {
    // A decode step (one row per sequence): one launch scores every row against its own region, over
    // the longest sequence's length (each row's later keys are masked: -inf, as if absent), one top-k
    // over all rows (exact: the same selection as over the row's own length). Shaped for a graph
    // (also at B = 1): over max_ctx keys, nothing of this step's host data in the launches.
    const int64_t Lmax = sr->graph_shape ? ctx : *std::max_element(sr->pos.begin(), sr->pos.end()) + 1;
    auto scores = fbuf(T * Lmax);
    indexer_select_f32_rows(qi, skeys[l].as<float>(), sr->key_off[(size_t)cur], wts, d_pos, T, Hi, Di, Lmax, K, scores.as<float>(), top);
    paged_rows(top, T, K, sr->row_tab[(size_t)cur], sr->tab[(size_t)cur], max_pages, page_rows);
    return;
  }
  int64_t cells = 0;
  for (const auto& [b, e] : sr->groups) cells = std::max<int64_t>(cells, (e - b) * (sr->pos[(size_t)e - 1] + 1));
  auto scores = fbuf(cells);
  for (const auto& [b, e] : sr->groups) {
    const int64_t Lg = sr->pos[(size_t)e - 1] + 1;  // the sequence's keys 0 .. its last row's position
    const float* keys = skeys[l].as<float>() + (int64_t)sr->slot[(size_t)b] * ctx * Di;
    indexer_select_f32_rows(qi + b * Hi * Di, keys, nullptr, wts + b * Hi, d_pos + b, e - b, Hi, Di, Lg, K, scores.as<float>(), top + b * K);
  }
  paged_rows(top, T, K, sr->row_tab[(size_t)cur], sr->tab[(size_t)cur], max_pages, page_rows);
}

void Pipeline::Impl::attend(const uint16_t* qabs_h, const uint16_t* cache_h, int64_t Lkv, const int32_t* idx, const int32_t* d_pos, int64_t T,
            float* att, int64_t plan_queries) {
  SparseMlaArgs a;
  a.q = qabs_h;
  a.cache = cache_h;
  a.L = Lkv;
  a.idx = idx;
  a.q_pos = d_pos;
  a.T = T, a.H = c.n_head, a.d_qk = c.latent_dim(), a.d_v = c.kv_lora_rank, a.top_k = c.indexer_top_k;
  a.scale = (float)attn_scale;
  a.out = att;
  a.plan_queries = plan_queries;
  sparse_mla(a);
}

void Pipeline::Impl::v_up(int64_t l, const float* att, int64_t T, float* vout) {
  const DevTensor& vb = L(l, wname::kVB);
  apply_wuv(vb.type, vb.buf.get(), c.v_head(), c.kv_lora_rank, att, T, c.n_head, vout, opt.gemv);
}

void Pipeline::Impl::o_proj(int64_t l, const float* vout, int64_t T, float* ao) {
  linear(L(l, wname::kAttnOut), vout, T, ao);
}

void Pipeline::Impl::ffn_norm(int64_t l, const float* a, int64_t T, float* y) {
  rmsnorm(a, L(l, wname::kFfnNorm).buf.as<float>(), T, c.n_embd, c.n_embd, (float)c.rms_eps, y);
}

void Pipeline::Impl::add_ffn_norm(int64_t l, float* h, const float* ao, int64_t T, float* y) {
  add_rmsnorm(h, ao, L(l, wname::kFfnNorm).buf.as<float>(), T, c.n_embd, (float)c.rms_eps, y);
}

void Pipeline::Impl::dense_mlp(int64_t l, const float* y, int64_t T, float* m) {
  const int64_t F = c.n_ff;
  auto g = fbuf(T * F), u = fbuf(T * F);
  linear(L(l, wname::kFfnGate), y, T, g.as<float>());
  linear(L(l, wname::kFfnUp), y, T, u.as<float>());
  silu_gate(g.as<float>(), u.as<float>(), T * F, g.as<float>());
  linear(L(l, wname::kFfnDown), g.as<float>(), T, m);
}

void Pipeline::Impl::router_logits(int64_t l, const float* y, int64_t T, float* logits) {
  linear(L(l, wname::kGateInp), y, T, logits);
}

}  // namespace mlaconf::cuda
