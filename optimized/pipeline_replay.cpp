// mlaconf optimized: op replay (Pipeline::replay_op): one op of one layer on a fixture's exact inputs.
//
// The op's inputs (exact, from a fixture) go to the device as fp32 (the latent cache and the absorbed query as
// fp16, as the pipeline stores them), then the very member function the forward pass runs for that op; nothing
// is recorded and nothing is checked for overflow, so that a fault's inf shows in the answer as the first
// failing op. One function per op, found by its output dataset's name in the table kOps.
#include "optimized/pipeline_impl.h"

namespace mlaconf::cuda {

std::map<std::string, OpTensor> Pipeline::replay_op(int layer, const std::string& op, const std::map<std::string, OpTensor>& in,
                                                   int64_t pos0) {
  return impl_->replay(layer, op, in, pos0);
}

// One replay: its inputs (checked, uploaded), the model's dims, and its outputs by dataset name.
struct Pipeline::Impl::Replay {
  Replay(Impl& pipeline, int layer, const std::string& op_name, const std::map<std::string, OpTensor>& inputs, int64_t pos)
      : pl(pipeline), l(layer), op(op_name), in(inputs), pos0(pos) {}
  Impl& pl;
  const int l;
  const std::string& op;
  const std::map<std::string, OpTensor>& in;
  const int64_t pos0;
  const ModelConfig& c = pl.c;
  const int64_t E = c.n_embd, H = c.n_head, dn = c.qk_nope(), R = c.qk_rope(), dq = c.qk_head(), dl = c.kv_lora_rank;
  const int64_t dlat = dl + R, Q = c.q_lora_rank, Hi = c.indexer_n_head, Di = c.indexer_head_size, K = c.indexer_top_k;
  const int64_t V = c.v_head(), U = c.n_expert_used, X = c.n_expert;
  std::map<std::string, OpTensor> out;

  // An input [rows, width values] (width 0: any), checked.
  const OpTensor& input(const char* name, int64_t width) const {
    auto it = in.find(name);
    if (it == in.end()) throw InputError("op replay of " + op + ": input " + name + " is missing");
    const OpTensor& t = it->second;
    int64_t w = 1;
    for (size_t i = 1; i < t.shape.size(); ++i) w *= t.shape[i];
    if (t.shape.empty() || (width > 0 && w != width) || (int64_t)t.v.size() != t.shape[0] * w)
      throw InputError("op replay of " + op + ": input " + name + " does not have " + std::to_string(width) + " values per row");
    return t;
  }
  int64_t rows(const char* name) const { return input(name, 0).shape[0]; }
  DeviceBuffer up(const char* name, int64_t width) const {
    const OpTensor& t = input(name, width);
    return to_device(std::vector<float>(t.v.begin(), t.v.end()));
  }
  std::vector<int32_t> up_i32(const char* name, int64_t width, int32_t lo, int64_t hi) const {
    const OpTensor& t = input(name, width);
    std::vector<int32_t> v(t.v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (t.v[i] < lo || t.v[i] > (double)hi)
        throw InputError("op replay of " + op + ": " + name + " entry " + std::to_string((long long)t.v[i]) + " is outside [" +
                         std::to_string(lo) + ", " + std::to_string(hi) + "]");
      v[i] = (int32_t)t.v[i];
    }
    return v;
  }
  void same_rows(const char* a, const char* b) const {
    if (rows(a) != rows(b)) throw InputError("op replay of " + op + ": " + a + " and " + b + " rows differ");
  }
  static OpTensor down(const void* d, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<float> h(n);
    if (n) copy_to_host(h.data(), d, n * 4);
    return OpTensor{std::move(shape), to_double(h)};
  }
  DeviceBuffer positions(int64_t T) const {
    std::vector<int32_t> p(T);
    for (int64_t t = 0; t < T; ++t) p[t] = (int32_t)(pos0 + t);
    return to_device(p);
  }

  // ---- One function per op (the inputs its table row of tools/backend/op_table.h names).

  void attn_norm_out() {
    auto h = up(op::kInputHidden, E);
    const int64_t T = rows(op::kInputHidden);
    auto x = fbuf(T * E);
    pl.attn_norm(l, h.as<float>(), T, x.as<float>());
    out[op] = down(x.get(), {T, E});
  }
  void q_a() {
    auto x = up(op::kAttnNormOut, E);
    const int64_t T = rows(op::kAttnNormOut);
    auto qa = fbuf(T * Q);
    pl.q_a(l, x.as<float>(), T, qa.as<float>());
    out[op] = down(qa.get(), {T, Q});
  }
  void q_a_norm() {
    auto qa = up(op::kQA, Q);
    const int64_t T = rows(op::kQA);
    auto cq = fbuf(T * Q);
    pl.q_a_norm(l, qa.as<float>(), T, cq.as<float>());
    out[op] = down(cq.get(), {T, Q});
  }
  void q_b() {
    auto cq = up(op::kQANorm, Q);
    const int64_t T = rows(op::kQANorm);
    auto qb = fbuf(T * H * dq);
    pl.q_b(l, cq.as<float>(), T, qb.as<float>());
    out[op] = down(qb.get(), {T, H, dq});
  }
  void q_pe_rope() {
    auto qb = up(op::kQB, H * dq);
    const int64_t T = rows(op::kQB);
    auto d_pos = positions(T);
    pl.q_rope(qb.as<float>(), T, d_pos.as<int32_t>());
    auto qpe = fbuf(T * H * R);
    copy2d(qpe.get(), R * 4, qb.as<float>() + dn, dq * 4, R * 4, T * H);
    out[op] = down(qpe.get(), {T, H, R});
  }
  void kv_a() {
    auto x = up(op::kAttnNormOut, E);
    const int64_t T = rows(op::kAttnNormOut);
    auto kva = fbuf(T * dlat);
    pl.kv_a(l, x.as<float>(), T, kva.as<float>());
    out[op] = down(kva.get(), {T, dlat});
  }
  // kv_latent or k_pe_rope: the part of latent_rows() the op names.
  void latent_part() {
    auto kva = up(op::kKvA, dlat);
    const int64_t T = rows(op::kKvA);
    auto d_pos = positions(T);
    auto lat = fbuf(T * dlat);
    pl.latent_rows(l, kva.as<float>(), T, d_pos.as<int32_t>(), lat.as<float>());
    const bool latent_part = op == op::kKvLatent;
    const int64_t w = latent_part ? dl : R;
    auto part = fbuf(T * w);
    copy2d(part.get(), w * 4, lat.as<float>() + (latent_part ? 0 : dl), dlat * 4, w * 4, T);
    out[op] = down(part.get(), {T, w});
  }
  void q_absorbed() {
    // q_b with its rope values replaced by the given q_pe_rope: what pl.absorb() reads in a forward pass.
    auto qb = up(op::kQB, H * dq);
    auto qpe = up(op::kQPeRope, H * R);
    same_rows(op::kQB, op::kQPeRope);
    const int64_t T = rows(op::kQB);
    copy2d(qb.as<float>() + dn, dq * 4, qpe.get(), R * 4, R * 4, T * H);
    auto qabs = fbuf(T * H * dlat);
    pl.absorb(l, qb.as<float>(), T, qabs.as<float>());
    out[op] = down(qabs.get(), {T, H, dlat});
  }
  void indexer_q() {
    auto cq = up(op::kQANorm, Q);
    const int64_t T = rows(op::kQANorm);
    auto d_pos = positions(T);
    auto qi = fbuf(T * Hi * Di);
    pl.indexer_q(l, cq.as<float>(), T, d_pos.as<int32_t>(), qi.as<float>());
    out[op] = down(qi.get(), {T, Hi, Di});
  }
  void indexer_k() {
    // The T new keys at positions pos0.. after the S - T earlier rows of the key cache given.
    auto x = up(op::kAttnNormOut, E);
    auto keys = up(op::kIndexerK, Di);
    const int64_t T = rows(op::kAttnNormOut), S = rows(op::kIndexerK);
    if (S != pos0 + T)
      throw InputError("op replay of indexer_k: the cache given holds " + std::to_string(S) + " rows, not pos0 + T = " +
                       std::to_string(pos0 + T));
    auto d_pos = positions(T);
    pl.indexer_k(l, x.as<float>(), T, d_pos.as<int32_t>(), keys.as<float>() + pos0 * Di);
    out[op] = down(keys.get(), {S, Di});
  }
  void indexer_weights() {
    auto x = up(op::kAttnNormOut, E);
    const int64_t T = rows(op::kAttnNormOut);
    auto wts = fbuf(T * Hi);
    pl.indexer_weights(l, x.as<float>(), T, wts.as<float>());
    out[op] = down(wts.get(), {T, Hi});
  }
  void indexer_scores() {
    auto qi = up(op::kIndexerQ, Hi * Di);
    auto keys = up(op::kIndexerK, Di);
    auto wts = up(op::kIndexerWeights, Hi);
    same_rows(op::kIndexerQ, op::kIndexerWeights);
    const int64_t T = rows(op::kIndexerQ), S = rows(op::kIndexerK);
    auto d_pos = positions(T);
    auto scores = fbuf(T * S);
    pl.indexer_score_rows(qi.as<float>(), keys.as<float>(), wts.as<float>(), d_pos.as<int32_t>(), T, S, scores.as<float>());
    out[op] = down(scores.get(), {T, S});
  }
  void indexer_topk() {
    const OpTensor& st = input(op::kIndexerScores, 0);
    const int64_t T = st.shape[0], S = st.shape.size() == 2 ? st.shape[1] : 0;
    std::vector<float> s(st.v.begin(), st.v.end());
    auto d_s = to_device(s);
    DeviceBuffer top((size_t)std::max<int64_t>(T * K, 1) * 4);
    topk_rows(d_s.as<float>(), T, S, K, top.as<int32_t>());
    std::vector<int32_t> idx(T * K), tie;
    std::vector<double> gap;
    if (T * K > 0) copy_to_host(idx.data(), top.get(), idx.size() * 4);
    pl.topk_extras(s, T, S, K, tie, gap);
    out[op::kIndexerTopk] = OpTensor{{T, K}, std::vector<double>(idx.begin(), idx.end())};
    out[op::kIndexerTopkTie] = OpTensor{{T}, std::vector<double>(tie.begin(), tie.end())};
    out[op::kIndexerTopkGap] = OpTensor{{T}, gap};
  }
  void attn_latent_out() {
    // fp16 query and cache rows, as the forward pass stores them.
    auto qabs = up(op::kQAbsorbed, H * dlat);
    auto cache = up(op::kLatentCache, dlat);
    const int64_t T = rows(op::kQAbsorbed), S = rows(op::kLatentCache);
    same_rows(op::kQAbsorbed, op::kIndexerTopk);
    auto idx = to_device(up_i32(op::kIndexerTopk, K, -1, S - 1));
    DeviceBuffer qabs_h((size_t)std::max<int64_t>(T * H * dlat, 1) * 2), cache_h((size_t)std::max<int64_t>(S * dlat, 1) * 2);
    to_half(qabs.as<float>(), T * H * dlat, qabs_h.as<uint16_t>());
    to_half(cache.as<float>(), S * dlat, cache_h.as<uint16_t>());
    auto d_pos = positions(T);
    auto att = fbuf(T * H * dl);
    pl.attend(qabs_h.as<uint16_t>(), cache_h.as<uint16_t>(), S, idx.as<int32_t>(), d_pos.as<int32_t>(), T, att.as<float>());
    out[op] = down(att.get(), {T, H, dl});
  }
  void attn_v_out() {
    auto att = up(op::kAttnLatentOut, H * dl);
    const int64_t T = rows(op::kAttnLatentOut);
    auto vout = fbuf(T * H * V);
    pl.v_up(l, att.as<float>(), T, vout.as<float>());
    out[op] = down(vout.get(), {T, H, V});
  }
  void attn_out() {
    auto vout = up(op::kAttnVOut, H * V);
    const int64_t T = rows(op::kAttnVOut);
    auto ao = fbuf(T * E);
    pl.o_proj(l, vout.as<float>(), T, ao.as<float>());
    out[op] = down(ao.get(), {T, E});
  }
  void ffn_norm_out() {
    auto h = up(op::kInputHidden, E);
    auto ao = up(op::kAttnOut, E);
    same_rows(op::kInputHidden, op::kAttnOut);
    const int64_t T = rows(op::kInputHidden);
    add_inplace(h.as<float>(), ao.as<float>(), T * E);
    auto y = fbuf(T * E);
    pl.ffn_norm(l, h.as<float>(), T, y.as<float>());
    out[op] = down(y.get(), {T, E});
  }
  void router_logits() {
    auto y = up(op::kFfnNormOut, E);
    const int64_t T = rows(op::kFfnNormOut);
    auto lg = fbuf(T * X);
    pl.router_logits(l, y.as<float>(), T, lg.as<float>());
    out[op] = down(lg.get(), {T, X});
  }
  void router_ids() {
    const OpTensor& t = input(op::kRouterLogits, X);
    const int64_t T = t.shape[0];
    Route r = pl.route(l, std::vector<float>(t.v.begin(), t.v.end()), T);
    out[op::kRouterIds] = OpTensor{{T, U}, std::vector<double>(r.ids.begin(), r.ids.end())};
    out[op::kRouterWeights] = OpTensor{{T, U}, to_double(r.wts)};
    out[op::kRouterTopkGap] = OpTensor{{T}, r.gap};
  }
  void expert_out() {
    auto y = up(op::kFfnNormOut, E);
    same_rows(op::kFfnNormOut, op::kRouterIds);
    const int64_t T = rows(op::kFfnNormOut);
    const std::vector<int32_t> ids = up_i32(op::kRouterIds, U, 0, X - 1);
    auto eo = fbuf(T * U * E);
    pl.experts(l, y.as<float>(), T, ids, eo.as<float>());
    out[op] = down(eo.get(), {T, U, E});
  }
  void shared_expert_out() {
    auto y = up(op::kFfnNormOut, E);
    const int64_t T = rows(op::kFfnNormOut);
    auto sh = fbuf(T * E);
    pl.shared_expert(l, y.as<float>(), T, sh.as<float>());
    out[op] = down(sh.get(), {T, E});
  }
  // mlp_out of a dense layer: the MLP; of a MoE layer: the weighted combine of the given expert outputs.
  void mlp_out_dense() {
    auto y = up(op::kFfnNormOut, E);
    const int64_t T = rows(op::kFfnNormOut);
    auto m = fbuf(T * E);
    pl.dense_mlp(l, y.as<float>(), T, m.as<float>());
    out[op] = down(m.get(), {T, E});
  }
  void mlp_out_moe() {
    auto eo = up(op::kExpertOut, U * E);
    const OpTensor& w = input(op::kRouterWeights, U);
    same_rows(op::kExpertOut, op::kRouterWeights);
    const int64_t T = rows(op::kExpertOut);
    DeviceBuffer sh;
    if (c.n_expert_shared > 0) {
      sh = up(op::kSharedExpertOut, E);
      same_rows(op::kExpertOut, op::kSharedExpertOut);
    }
    auto m = fbuf(T * E);
    pl.combine(eo.as<float>(), std::vector<float>(w.v.begin(), w.v.end()), sh.get() ? sh.as<float>() : nullptr, T, m.as<float>());
    out[op] = down(m.get(), {T, E});
  }
  void mlp_out() { c.is_moe_layer(l) ? mlp_out_moe() : mlp_out_dense(); }
  void output_hidden() {
    auto h = up(op::kInputHidden, E);
    auto ao = up(op::kAttnOut, E);
    auto m = up(op::kMlpOut, E);
    same_rows(op::kInputHidden, op::kAttnOut);
    same_rows(op::kInputHidden, op::kMlpOut);
    const int64_t T = rows(op::kInputHidden);
    add_inplace(h.as<float>(), ao.as<float>(), T * E);
    add_inplace(h.as<float>(), m.as<float>(), T * E);
    out[op] = down(h.get(), {T, E});
  }

  using Fn = void (Replay::*)();
  struct Row {
    const char* op;
    Fn fn;
  };
  static constexpr Row kOps[] = {
      {op::kAttnNormOut, &Replay::attn_norm_out},
      {op::kQA, &Replay::q_a},
      {op::kQANorm, &Replay::q_a_norm},
      {op::kQB, &Replay::q_b},
      {op::kQPeRope, &Replay::q_pe_rope},
      {op::kKvA, &Replay::kv_a},
      {op::kKvLatent, &Replay::latent_part},
      {op::kKPeRope, &Replay::latent_part},
      {op::kQAbsorbed, &Replay::q_absorbed},
      {op::kIndexerQ, &Replay::indexer_q},
      {op::kIndexerK, &Replay::indexer_k},
      {op::kIndexerWeights, &Replay::indexer_weights},
      {op::kIndexerScores, &Replay::indexer_scores},
      {op::kIndexerTopk, &Replay::indexer_topk},
      {op::kAttnLatentOut, &Replay::attn_latent_out},
      {op::kAttnVOut, &Replay::attn_v_out},
      {op::kAttnOut, &Replay::attn_out},
      {op::kFfnNormOut, &Replay::ffn_norm_out},
      {op::kRouterLogits, &Replay::router_logits},
      {op::kRouterIds, &Replay::router_ids},
      {op::kExpertOut, &Replay::expert_out},
      {op::kSharedExpertOut, &Replay::shared_expert_out},
      {op::kMlpOut, &Replay::mlp_out},
      {op::kOutputHidden, &Replay::output_hidden},
  };
  std::map<std::string, OpTensor> run() {
    for (const Row& r : kOps)
      if (op == r.op) {
        (this->*r.fn)();
        return std::move(out);
      }
    throw InputError("op replay: unknown op '" + op + "'");
  }
};

std::map<std::string, OpTensor> Pipeline::Impl::replay(int l, const std::string& op, const std::map<std::string, OpTensor>& in,
                                                       int64_t pos0) {
  if (l < 0 || l >= c.n_layer_run()) throw InputError("op replay: layer " + std::to_string(l) + " is outside the model");
  if (pos0 < 0 || pos0 > INT32_MAX) throw InputError("op replay: pos0 " + std::to_string(pos0) + " is out of range");
  tr = nullptr;
  forced = nullptr;
  // The layer's stage (layer split): its weights, and the dequant buffer linear() picks, live on its device.
  DeviceScope keep(current_device());
  cur = layer_stage[(size_t)l];
  set_device(stage_dev[(size_t)cur]);
  return Replay(*this, l, op, in, pos0).run();
}

}  // namespace mlaconf::cuda
