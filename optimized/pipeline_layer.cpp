// mlaconf optimized: one layer of the forward pass (Pipeline::Impl::layer) and its top-k extras.
#include "optimized/pipeline_impl.h"

namespace mlaconf::cuda {

// The indexer's selection in forward(): scores over the layer's key cache, top-k into `top` [T, K]; the scores,
// the selection and its extras recorded; forced selections then replace ours for attention.
void Pipeline::Impl::indexer_select(int64_t l, const float* qi, float* wts, const int32_t* d_pos, int64_t T, DeviceBuffer& top) {
  const int64_t Hi = c.indexer_n_head, Di = c.indexer_head_size, K = c.indexer_top_k, Lkv = n_past + T;
  auto scores = fbuf(T * Lkv);
  scale_indexer_weights(wts, T);
  indexer_topk_f32_rows(qi, ikeys[l].as<float>(), nullptr, wts, d_pos, T, Hi, Di, Lkv, K, scores.as<float>(), top.as<int32_t>());
  rec(l, op::kIndexerScores, scores.as<float>(), {T, Lkv});
  record_own_topk(l, top.as<int32_t>(), T, K);
  record_topk_extras(l, scores.as<float>(), T, Lkv, K);
  force_topk(l, T, K, top);
}

void Pipeline::Impl::layer(int64_t l, float* h, int64_t T, const int32_t* d_pos, std::vector<DeviceBuffer>& topk_by_layer) {
  const int64_t E = c.n_embd, H = c.n_head, dn = c.qk_nope(), R = c.qk_rope(), dq = c.qk_head(), dl = c.kv_lora_rank;
  const int64_t dlat = dl + R, Lkv = n_past + T;
  rec(l, op::kInputHidden, h, {T, E});

  auto x = fbuf(T * E);
  attn_norm(l, h, T, x.as<float>());
  done(l, op::kAttnNormOut, x.as<float>(), {T, E});
  // The indexer of a full layer (scores, top-k) in three parts: its key and weights (of x alone), its query (of
  // cq), the selection. A decode step over sequences (every product a GEMV: a prefill's products share the
  // stage's dequantization buffer and cuBLAS handle) without overflow checks, traces or forced decisions queues
  // them on the side stream beside the query path, joined before sparse MLA: the key and weights from here,
  // beside q_a and q_a_norm; the query and the selection once cq is queued (a second fork), beside q_b, the
  // latent and the absorbed query. At B = 1 both streams are chains of small launches that leave most SMs idle,
  // and the indexer's is the longer. Elsewhere the parts run after the query path, in their order of old.
  const int64_t K = c.indexer_top_k;
  const bool full = c.is_full_indexer_layer(l);
  const int64_t Hi = c.indexer_n_head, Di = c.indexer_head_size;
  DeviceBuffer qi, wts;
  auto run_indexer_kw = [&] {
    auto ki = fbuf(T * Di);
    // Over sequences each row's key goes to its sequence's region (scattered by indexer_k's launch where fused).
    const int32_t* key_rows = sr ? sr->key_rows[(size_t)cur] : nullptr;
    const bool scattered = indexer_k(l, x.as<float>(), T, d_pos, ki.as<float>(), key_rows, sr ? skeys[l].as<float>() : nullptr);
    done(l, op::kIndexerK, ki.as<float>(), {T, Di});
    if (!sr)
      copy2d(ikeys[l].as<float>() + n_past * Di, Di * 4, ki.get(), Di * 4, Di * 4, T);
    else if (!scattered)
      scatter_rows(ki.as<float>(), Di, key_rows, T, Di, skeys[l].as<float>(), Di);
    wts = fbuf(T * Hi);
    indexer_weights(l, x.as<float>(), T, wts.as<float>());
    done(l, op::kIndexerWeights, wts.as<float>(), {T, Hi});
  };
  std::optional<SideStream> side;
  if (full && sr && all_gemv && !opt.overflow_check && !tr && !forced) {
    side.emplace();
    side->run(run_indexer_kw);
  }

  auto qa = fbuf(T * c.q_lora_rank);
  q_a(l, x.as<float>(), T, qa.as<float>());
  done(l, op::kQA, qa.as<float>(), {T, c.q_lora_rank});
  auto cq = fbuf(T * c.q_lora_rank);
  q_a_norm(l, qa.as<float>(), T, cq.as<float>());
  done(l, op::kQANorm, cq.as<float>(), {T, c.q_lora_rank});
  auto run_indexer_q = [&] {
    qi = fbuf(T * Hi * Di);
    indexer_q(l, cq.as<float>(), T, d_pos, qi.as<float>());
    done(l, op::kIndexerQ, qi.as<float>(), {T, Hi, Di});
  };
  auto run_indexer_select = [&] {
    topk_by_layer[l] = tbuf((size_t)T * K * 4);
    if (sr) {  // a pass over sequences (no trace, no forced decisions)
      indexer_select_seq(l, qi.as<float>(), wts.as<float>(), d_pos, T, topk_by_layer[l].as<int32_t>());
    } else {
      indexer_select(l, qi.as<float>(), wts.as<float>(), d_pos, T, topk_by_layer[l]);
    }
  };
  if (side) {
    // At one token the side stream is the longer one: its key and weights (~25 us of small launches on the
    // H200) hold back the query's projection queued behind them, and the main stream waited ~20 us a layer at the
    // join (docs/perf/h200-2026-12-02.md v13). So there the projection runs here, beside them, and the side takes the query from RoPE
    // on. The same launches either way, so the same bits.
    const bool q_proj_here = T == 1 && opt.indexer_q_main;
    if (q_proj_here) {
      qi = fbuf(T * Hi * Di);
      indexer_q_proj(l, cq.as<float>(), T, qi.as<float>());
    }
    side->refork();
    side->run([&] {
      if (q_proj_here) {
        indexer_q_rope(qi.as<float>(), T, d_pos);
        done(l, op::kIndexerQ, qi.as<float>(), {T, Hi, Di});
      } else {
        run_indexer_q();
      }
      run_indexer_select();
    });
  }

  auto qb = fbuf(T * H * dq);
  q_b(l, cq.as<float>(), T, qb.as<float>());
  done(l, op::kQB, qb.as<float>(), {T, H, dq});
  q_rope(qb.as<float>(), T, d_pos);
  if (wants(l, op::kQPeRope)) {
    auto tmp = fbuf(T * H * R);
    copy2d(tmp.get(), R * 4, qb.as<float>() + dn, dq * 4, R * 4, T * H);
    rec(l, op::kQPeRope, tmp.as<float>(), {T, H, R});
  }

  latent_to_cache(l, x.as<float>(), T, d_pos);

  // Absorbed query [W_UK^T q_nope | q_pe], per head.
  auto qabs = fbuf(T * H * dlat);
  absorb(l, qb.as<float>(), T, qabs.as<float>());
  done(l, op::kQAbsorbed, qabs.as<float>(), {T, H, dlat});
  DeviceBuffer qabs_h = tbuf((size_t)T * H * dlat * 2);
  to_half(qabs.as<float>(), T * H * dlat, qabs_h.as<uint16_t>());

  // The indexer's selection (full layers) or the source layer's.
  if (side) {
    side->join();
  } else if (full) {
    run_indexer_q();
    run_indexer_kw();
    run_indexer_select();
  }
  const int64_t src = full ? l : c.indexer_source_layer(l);
  if (src < 0 || src >= l + 1 || !topk_by_layer[src].get())
    throw InputError(f.path() + ": layer " + std::to_string(l) + " shares the indexer of layer " + std::to_string(src) +
                     ", which did not run");
  if (!full) record_shared_selection(l, src, T, K);

  // Sparse MLA over the latent cache, then W_UV and the output projection.
  auto att = fbuf(T * H * dl);
  if (sr)  // absolute rows of the shared pool
    attend(qabs_h.as<uint16_t>(), pool[l].as<uint16_t>(), pool_rows, topk_by_layer[src].as<int32_t>(), d_pos, T, att.as<float>(),
           sr->plan_queries);
  else
    attend(qabs_h.as<uint16_t>(), latent[l].as<uint16_t>(), Lkv, topk_by_layer[src].as<int32_t>(), d_pos, T, att.as<float>());
  done(l, op::kAttnLatentOut, att.as<float>(), {T, H, dl});
  const int64_t V = c.v_head();
  auto vout = fbuf(T * H * V);
  v_up(l, att.as<float>(), T, vout.as<float>());
  done(l, op::kAttnVOut, vout.as<float>(), {T, H, V});
  auto ao = fbuf(T * E);
  o_proj(l, vout.as<float>(), T, ao.as<float>());
  done(l, op::kAttnOut, ao.as<float>(), {T, E});

  ffn(l, h, ao.as<float>(), T);
}

// The latent of the T rows, [RMSNorm(kv_a[:dl]) | RoPE(kv_a[dl:])] of x, to the fp16 cache: rows n_past..n_past+T-1
// of the layer's cache, or (a pass over sequences) each row to its page of the shared pool.
void Pipeline::Impl::latent_to_cache(int64_t l, const float* x, int64_t T, const int32_t* d_pos) {
  const int64_t R = c.qk_rope(), dl = c.kv_lora_rank, dlat = dl + R;
  auto kva = fbuf(T * dlat);
  kv_a(l, x, T, kva.as<float>());
  done(l, op::kKvA, kva.as<float>(), {T, dlat});
  auto lat = fbuf(T * dlat);
  latent_rows(l, kva.as<float>(), T, d_pos, lat.as<float>());
  if (wants(l, op::kKvLatent)) {
    auto tmp = fbuf(T * dl);
    copy2d(tmp.get(), dl * 4, lat.get(), dlat * 4, dl * 4, T);
    rec(l, op::kKvLatent, tmp.as<float>(), {T, dl});
  }
  if (wants(l, op::kKPeRope)) {
    auto tmp = fbuf(T * R);
    copy2d(tmp.get(), R * 4, lat.as<float>() + dl, dlat * 4, R * 4, T);
    rec(l, op::kKPeRope, tmp.as<float>(), {T, R});
  }
  done(l, op::kLatentCache, lat.as<float>(), {T, dlat});
  if (sr)  // a pass over sequences: each row to its page of the shared pool
    to_half_rows(lat.as<float>(), T, dlat, sr->lat_rows[(size_t)cur], pool[l].as<uint16_t>());
  else
    to_half(lat.as<float>(), T * dlat, latent[l].as<uint16_t>() + n_past * dlat);
}

// The FFN of the layer, h += attn_out (ao) first (fused into the norm), then h += the dense MLP's or the MoE's output.
void Pipeline::Impl::ffn(int64_t l, float* h, const float* ao, int64_t T) {
  const int64_t E = c.n_embd;
  auto y = fbuf(T * E);
  add_ffn_norm(l, h, ao, T, y.as<float>());
  done(l, op::kFfnNormOut, y.as<float>(), {T, E});
  auto m = fbuf(T * E);
  // A MoE layer adds its output to h in its combine launch; not with the overflow check on, which must
  // see mlp_out before h changes.
  float* fused_res = c.is_moe_layer(l) && !opt.overflow_check ? h : nullptr;
  if (!c.is_moe_layer(l))
    dense_mlp(l, y.as<float>(), T, m.as<float>());
  else
    moe(l, y.as<float>(), T, m.as<float>(), fused_res);
  done(l, op::kMlpOut, m.as<float>(), {T, E});
  if (!fused_res) add_inplace(h, m.as<float>(), T * E);
  done(l, op::kOutputHidden, h, {T, E});
}

}  // namespace mlaconf::cuda
