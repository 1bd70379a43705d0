// mlaconf reference: the GLM-5 forward pass (see model.h), in the order of the paper: attention input
// norm, MLA projections, DSA indexer, sparse attention, output projection, residual, FFN norm, dense MLP
// or MoE, residual. The math is the op functions of reference/ (ops.h, mla.h, indexer.h, moe.h), the
// same ones suites/reference/test_ops.cpp checks; this file only wires them together (weights, caches,
// forced decisions) and records the trace between them.
#include "reference/model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "core/weight_layout.h"
#include "reference/indexer.h"
#include "reference/moe.h"
#include "reference/threads.h"
#include "reference/weights.h"

namespace mlaconf::ref {

namespace {

// Records a row-major matrix (any shape whose product is its size) as double (without a copy when it is).
template <class S>
void rec(Trace* tr, int64_t layer, const char* name, const Mat<S>& m, std::vector<int64_t> shape) {
  if (!tr || !tr->wants(static_cast<int>(layer), name)) return;
  if constexpr (std::is_same_v<S, double>) {
    tr->record(static_cast<int>(layer), name, m.data(), shape);
    return;
  }
  std::vector<double> d(static_cast<size_t>(m.size()));
  for (Eigen::Index r = 0, k = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); ++c) d[k++] = static_cast<double>(m(r, c));
  tr->record(static_cast<int>(layer), name, d.data(), shape);
}
void rec_i32(Trace* tr, int64_t layer, const char* name, const MatI& m) {
  if (!tr || !tr->wants(static_cast<int>(layer), name)) return;
  std::vector<int32_t> d(static_cast<size_t>(m.size()));
  for (Eigen::Index r = 0, k = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); ++c) d[k++] = m(r, c);
  tr->record_i32(static_cast<int>(layer), name, d.data(), {m.rows(), m.cols()});
}
void rec_vec(Trace* tr, int64_t layer, const char* name, const std::vector<double>& v) {
  if (!tr || !tr->wants(static_cast<int>(layer), name)) return;
  tr->record(static_cast<int>(layer), name, v.data(), {static_cast<int64_t>(v.size())});
}
void rec_vec_i32(Trace* tr, int64_t layer, const char* name, const std::vector<uint8_t>& v) {
  if (!tr || !tr->wants(static_cast<int>(layer), name)) return;
  std::vector<int32_t> d(v.begin(), v.end());
  tr->record_i32(static_cast<int>(layer), name, d.data(), {static_cast<int64_t>(v.size())});
}

std::string blk(int64_t l, const char* s) { return wname::blk(l, s); }

// Where a layer stands, for a progress display (Trace::progress). The fractions are the shares of the
// work of one full-size GLM-5 MoE layer at 2304 tokens (by multiply-adds): projections and indexer 12 %,
// sparse attention 13 %, output projection 18 %, router 2 %, routed experts 50 %, shared expert 5 %.
constexpr double kAtAttention = 0.12, kAtOutProj = 0.25, kAtFfn = 0.43, kAtExperts = 0.45, kAtShared = 0.95;
void tick(Trace* tr, int64_t layer, double fraction, const std::string& what) {
  if (tr) tr->progress(static_cast<int>(layer), fraction, what);
}
std::string of(int64_t done, int64_t total, const char* unit) {
  return std::to_string(done) + "/" + std::to_string(total) + " " + unit;
}

// Query rows per piece of sparse attention: the absorbed queries and latent outputs of one piece
// ([rows, H, kv_lora + rope] and [rows, H, kv_lora]: 75 MB and 67 MB as double at GLM-5's 64 heads) are
// the only attention temporaries, unless the trace records them whole.
constexpr int64_t kAttentionRows = 256;
constexpr int64_t kOutProjRows = 512;  // rows per piece of the output projection (a multiple of kRowAlign)

}  // namespace

template <class S>
int32_t argmax_lower(const Eigen::Ref<const Vec<S>>& row, double* margin) {
  int32_t best = -1, second = -1;
  for (Eigen::Index i = 0; i < row.size(); ++i) {
    if (best < 0 || row[i] > row[best]) {  // strictly greater: ties keep the lower id
      second = best;
      best = static_cast<int32_t>(i);
    } else if (second < 0 || row[i] > row[second]) {
      second = static_cast<int32_t>(i);
    }
  }
  if (margin) *margin = second < 0 ? 0.0 : static_cast<double>(row[best]) - static_cast<double>(row[second]);
  return best;
}

Eigen::VectorXd model_rope_inv_freq(const ModelConfig& c) {
  RopeParams rp;
  rp.dim = c.n_rot;
  rp.theta = c.rope_freq_base;
  rp.yarn_factor = c.rope_scaling_factor;
  rp.yarn_orig_ctx = c.rope_scaling_orig_ctx;
  return rope_inv_freq(rp);
}

double model_attn_scale(const ModelConfig& c) {
  // softmax scale 1/sqrt(qk_nope + qk_rope); DeepSeek YaRN multiplies it by mscale².
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_head()));
  if (c.rope_scaling_factor > 1.0 && c.rope_yarn_log_multiplier > 0.0) {
    double m = 1.0 + c.rope_yarn_log_multiplier * std::log(c.rope_scaling_factor);
    scale *= m * m;
  }
  return scale;
}

template <class S>
struct Model<S>::Impl {
  struct LayerCache {
    RowCache<S> latent;     // [n, kv_lora + rope]: [c | k_pe (roped)]
    RowCache<S> index_key;  // [n, Di]: indexer keys after LayerNorm and RoPE (full layers only)
  };
  Weights<S> w;
  std::vector<LayerCache> caches;
  Eigen::VectorXd inv_freq;
  double attn_scale = 0;

  Impl(const GgufFile& f, const ModelConfig& c, const ModelOptions& o) : w(f, c, o.expert_cache_bytes) {}
};

template <class S>
Model<S>::Model(const GgufFile& f, const ModelConfig& c, ModelOptions opt) : c_(c), opt_(opt) {
  c_.validate(f.path());
  validate_weights(f, c_);
  impl_ = std::make_unique<Impl>(f, c_, opt_);
  impl_->inv_freq = model_rope_inv_freq(c_);
  impl_->attn_scale = model_attn_scale(c_);
  impl_->caches.resize(static_cast<size_t>(c_.n_layer_run()));
  for (auto& lc : impl_->caches) {
    lc.latent = RowCache<S>(c_.latent_dim());
    lc.index_key = RowCache<S>(c_.indexer_head_size);
  }
}

template <class S>
Model<S>::~Model() = default;
template <class S>
Model<S>::Model(Model&&) noexcept = default;

template <class S>
Weights<S>& Model<S>::weights() {
  return impl_->w;
}

template <class S>
Mat<S> Model<S>::latent_cache(int64_t layer) const {
  return impl_->caches.at(static_cast<size_t>(layer)).latent.copy();
}

template <class S>
void Model<S>::reset() {
  for (auto& lc : impl_->caches) {
    lc.latent.clear();
    lc.index_key.clear();
  }
  n_past_ = 0;
}

template <class S>
Mat<S> Model<S>::embed(std::span<const int32_t> ids) {
  return impl_->w.embed_rows(ids.data(), static_cast<int64_t>(ids.size()));
}

template <class S>
Mat<S> Model<S>::head(const Mat<S>& hidden, Trace* trace) {
  Weights<S>& W = impl_->w;
  Mat<S> fn = rmsnorm<S>(hidden, W.vec(wname::kOutputNorm), c_.rms_eps);  // [T, E]
  rec<S>(trace, -1, op::kFinalNorm, fn, {fn.rows(), fn.cols()});
  const char* out_name = W.has(wname::kOutput) ? wname::kOutput : wname::kTokenEmbd;  // tied fallback
  Mat<S> logits = W.linear_streamed(out_name, fn);  // [T, vocab]; a full-size head in blocks (bounded memory)
  rec<S>(trace, -1, op::kLogits, logits, {logits.rows(), logits.cols()});
  return logits;
}

// ---- one decoder layer ----------------------------------------------------------------------------
namespace {

template <class S>
struct LayerCtx {
  const ModelConfig& c;
  const ModelOptions& opt;
  Weights<S>& W;
  const Eigen::VectorXd& inv_freq;
  double scale;
  Trace* tr;
  int64_t l;
  int64_t pos0;
  std::vector<int64_t> pos;  // absolute positions of the T rows
  const ForcedDecisions* forced;  // may be null
};

// A forced [T, width] decision array as a matrix, each entry checked against [lo, hi(row)].
template <class Hi>
MatI forced_rows(const int32_t* d, int64_t T, int64_t width, const char* what, int64_t layer, int32_t lo, Hi hi) {
  MatI m(T, width);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < width; ++j) {
      const int32_t v = d[t * width + j];
      if (v < lo || v > hi(t))
        throw InputError("forced " + std::string(what) + " of layer " + std::to_string(layer) + ", row " + std::to_string(t) +
                         ": " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi(t)) + "]");
      m(t, j) = v;
    }
  return m;
}

// MLA projections: returns q [T, H*(nope+rope)] (q_pe roped), appends [c | k_pe] to the latent cache.
template <class S>
Mat<S> mla_project(LayerCtx<S>& L, const Mat<S>& x, const Mat<S>& cq, RowCache<S>& latent) {
  const ModelConfig& c = L.c;
  const int64_t T = x.rows(), H = c.n_head, dn = c.qk_nope(), R = c.qk_rope(), dq = c.qk_head(), dl = c.kv_lora_rank;
  Mat<S> q = linear<S>(cq, L.W.mat(blk(L.l, wname::kQB)));  // [T, H*dq], per head [nope | rope]
  rec<S>(L.tr, L.l, op::kQB, q, {T, H, dq});
  rope_heads_inplace<S>(q, H, dq, dn, L.pos.data(), L.inv_freq, RopeStyle::Interleaved);
  if (L.tr && L.tr->wants(static_cast<int>(L.l), op::kQPeRope)) {
    Mat<S> qpe(T, H * R);
    for (int64_t h = 0; h < H; ++h) qpe.middleCols(h * R, R) = q.middleCols(h * dq + dn, R);
    rec<S>(L.tr, L.l, op::kQPeRope, qpe, {T, H, R});
  }
  Mat<S> kva = linear<S>(x, L.W.mat(blk(L.l, wname::kKvA)));  // [T, kv_lora + rope] = [latent | k_pe]
  rec<S>(L.tr, L.l, op::kKvA, kva, {T, dl + R});
  Mat<S> lat = mla_latent<S>(kva, L.W.vec(blk(L.l, wname::kKvANorm)), c.rms_eps, L.pos.data(), L.inv_freq);
  rec<S>(L.tr, L.l, op::kKvLatent, Mat<S>(lat.leftCols(dl)), {T, dl});
  rec<S>(L.tr, L.l, op::kKPeRope, Mat<S>(lat.rightCols(R)), {T, R});
  rec<S>(L.tr, L.l, op::kLatentCache, lat, {T, dl + R});
  latent.append(lat);
  return q;
}

// DSA lightning indexer of a full layer: appends the keys to the key cache and selects the top-k.
template <class S>
TopK indexer_select(LayerCtx<S>& L, const Mat<S>& x, const Mat<S>& cq, RowCache<S>& keys) {
  const ModelConfig& c = L.c;
  const int64_t T = x.rows(), Hi = c.indexer_n_head, Di = c.indexer_head_size;
  const RopeStyle style = c.indexer_neox() ? RopeStyle::NeoX : RopeStyle::Interleaved;
  Mat<S> qi = indexer_queries<S>(cq, L.W.mat(blk(L.l, wname::kIdxQB)), Hi, L.pos.data(), L.inv_freq, style);
  rec<S>(L.tr, L.l, op::kIndexerQ, qi, {T, Hi, Di});
  Mat<S> ki = indexer_keys<S>(x, L.W.mat(blk(L.l, wname::kIdxK)), L.W.vec(blk(L.l, wname::kIdxKNorm)),
                              L.W.vec(blk(L.l, wname::kIdxKNormB)), L.pos.data(), L.inv_freq, style);  // [T, Di]
  rec<S>(L.tr, L.l, op::kIndexerK, ki, {T, Di});
  Mat<S> wts = linear<S>(x, L.W.mat(blk(L.l, wname::kIdxProj)));  // [T, Hi]
  rec<S>(L.tr, L.l, op::kIndexerWeights, wts, {T, Hi});
  keys.append(ki);
  Mat<S> scores = indexer_scores<S>(qi, keys.view(), wts, Hi, L.pos0);  // [T, pos0+T]
  rec<S>(L.tr, L.l, op::kIndexerScores, scores, {T, scores.cols()});
  return topk_lower_index<S>(scores, c.indexer_top_k);
}

// Sparse MLA of T queries over the latent cache, rows limited to each query's selection.
// q [T, H*(nope+rope)] (roped) -> per-head values [T, H*v].
template <class S>
Mat<S> mla_attend(LayerCtx<S>& L, const Mat<S>& q, const CRef<S>& cache, const TopK& sel, MlaForm form) {
  const ModelConfig& c = L.c;
  const int64_t T = q.rows(), H = c.n_head, R = c.qk_rope(), dl = c.kv_lora_rank, dv = c.v_head();
  const auto& kb = L.W.per_head(blk(L.l, wname::kKB));  // H x [kv_lora, nope] (= W_UK^T)
  const auto& vb = L.W.per_head(blk(L.l, wname::kVB));  // H x [v, kv_lora]    (= W_UV)
  if (static_cast<int64_t>(kb.size()) != H || static_cast<int64_t>(vb.size()) != H)
    throw InputError(L.W.file().path() + ": attn_k_b / attn_v_b head count differs from the config");
  Mat<S> out;
  if (form == MlaForm::Absorbed) {
    // In pieces of query rows (each row's values do not depend on the piece it is in); the absorbed
    // queries and latent outputs are kept whole only when the trace records them.
    const bool want_qabs = L.tr && L.tr->wants(static_cast<int>(L.l), op::kQAbsorbed);
    const bool want_olat = L.tr && L.tr->wants(static_cast<int>(L.l), op::kAttnLatentOut);
    Mat<S> qabs_all(want_qabs ? T : 0, H * (dl + R)), olat_all(want_olat ? T : 0, H * dl);
    out.resize(T, H * dv);
    for (int64_t r0 = 0; r0 < T; r0 += kAttentionRows) {
      const int64_t n = std::min(kAttentionRows, T - r0);
      Mat<S> qabs = absorb_query_rows<S>(q.middleRows(r0, n), kb, c.qk_nope());  // [n, H, kv_lora + rope]
      Mat<S> olat = sparse_mla_absorbed_rows<S>(qabs, cache, sel.idx.middleRows(r0, n), dl, L.scale);  // [n, H, kv_lora]
      out.middleRows(r0, n) = apply_v_up_rows<S>(olat, vb);
      if (want_qabs) qabs_all.middleRows(r0, n) = qabs;
      if (want_olat) olat_all.middleRows(r0, n) = olat;
      tick(L.tr, L.l, kAtAttention + (kAtOutProj - kAtAttention) * double(r0 + n) / double(T), "attention " + of(r0 + n, T, "rows"));
    }
    rec<S>(L.tr, L.l, op::kQAbsorbed, qabs_all, {T, H, dl + R});
    rec<S>(L.tr, L.l, op::kAttnLatentOut, olat_all, {T, H, dl});
  } else {
    out = sparse_mla_naive_rows<S>(q, cache, sel.idx, kb, vb, L.scale);
  }
  rec<S>(L.tr, L.l, op::kAttnVOut, out, {T, H, dv});
  return out;
}

// The router, the routed experts and the shared expert of a MoE layer. y [T, E] -> [T, E].
template <class S>
Mat<S> moe_forward(LayerCtx<S>& L, const Mat<S>& y) {
  const ModelConfig& c = L.c;
  const int64_t T = y.rows(), E = y.cols(), K = c.n_expert_used;
  Mat<S> logits = linear<S>(y, L.W.mat(blk(L.l, wname::kGateInp)));  // [T, n_expert]
  rec<S>(L.tr, L.l, op::kRouterLogits, logits, {T, c.n_expert});
  const std::string bias_name = blk(L.l, wname::kExpProbsB);
  Vec<S> bias = L.W.has(bias_name) ? L.W.vec(bias_name) : Vec<S>();
  const RouterParams rp = RouterParams::from(c);
  Route<S> r = moe_route<S>(logits, bias, rp);
  rec_i32(L.tr, L.l, op::kRouterIds, r.ids);  // our own decision, also when another is forced
  rec_vec(L.tr, L.l, op::kRouterTopkGap, r.gap);
  if (!r.group_gap.empty()) rec_vec(L.tr, L.l, op::kRouterGroupGap, r.group_gap);
  if (const int32_t* f = L.forced ? L.forced->experts_of(static_cast<int>(L.l), T, K) : nullptr) {
    r.ids = forced_rows(f, T, K, "router_ids", L.l, 0, [&](int64_t) { return c.n_expert - 1; });
    r.weights = route_weights<S>(logits, r.ids, rp);  // the weights that are used: those of the forced ids
  }
  rec<S>(L.tr, L.l, op::kRouterWeights, r.weights, {T, K});
  std::vector<int32_t> used(r.ids.data(), r.ids.data() + r.ids.size());
  std::sort(used.begin(), used.end());
  const int64_t n_used = std::unique(used.begin(), used.end()) - used.begin();
  tick(L.tr, L.l, kAtExperts, "experts " + of(0, n_used, "run"));
  MoeRun run;
  run.on_done = [&](int64_t done, int64_t total) {
    tick(L.tr, L.l, kAtExperts + (kAtShared - kAtExperts) * double(done) / double(total), "experts " + of(done, total, "run"));
  };
  // Experts in flight: each holds its dequantized weights (one spare per slot, reused from expert to
  // expert). One in flight: the experts one after another, each one's dequantization and products split
  // over the threads, through the LRU cache.
  const size_t per_expert = n_used > 0 ? std::max<size_t>(L.W.expert_bytes(L.l), 1) : 1;
  const int64_t by_budget = static_cast<int64_t>(L.opt.experts_in_flight_bytes / per_expert);
  run.in_flight = std::clamp<int64_t>(L.opt.experts_in_flight > 0 ? std::min(L.opt.experts_in_flight, by_budget) : by_budget, 1,
                                      std::min<int64_t>(threads(), std::max<int64_t>(n_used, 1)));
  std::vector<std::unique_ptr<ExpertWeights<S>>> spare(static_cast<size_t>(run.in_flight));
  const ExpertSlotSource<S> expert = [&](int64_t e, int64_t slot) {
    const ExpertWeights<S>& ew = run.in_flight == 1 ? L.W.expert(L.l, e) : L.W.expert_in_flight(L.l, e, spare[slot]);
    return ExpertRef<S>{ew.gate, ew.up, ew.down};
  };
  std::optional<ExpertRef<S>> shared;
  if (c.n_expert_shared > 0)
    shared.emplace(ExpertRef<S>{L.W.mat(blk(L.l, wname::kGateShexp)), L.W.mat(blk(L.l, wname::kUpShexp)),
                                L.W.mat(blk(L.l, wname::kDownShexp))});
  const bool want_expert_out = L.tr && L.tr->wants(static_cast<int>(L.l), op::kExpertOut);
  Mat<S> expert_out, shared_out;
  Mat<S> out = moe_ffn<S>(y, r.ids, r.weights, expert, run, shared ? &*shared : nullptr,
                          want_expert_out ? &expert_out : nullptr, &shared_out);
  if (want_expert_out) rec<S>(L.tr, L.l, op::kExpertOut, expert_out, {T, K, E});
  if (shared) rec<S>(L.tr, L.l, op::kSharedExpertOut, shared_out, {T, E});
  return out;
}

}  // namespace

template <class S>
Mat<S> Model<S>::forward_layers(const Mat<S>& hidden, int64_t pos0, int64_t l_begin, int64_t l_end, Trace* trace,
                                const ForcedDecisions* forced) {
  const int64_t n_run = c_.n_layer_run();
  if (l_begin < 0 || l_end > n_run || l_begin > l_end)
    throw std::invalid_argument("forward_layers: layer range [" + std::to_string(l_begin) + ", " +
                                std::to_string(l_end) + ") outside 0.." + std::to_string(n_run));
  if (hidden.cols() != c_.n_embd) throw std::invalid_argument("forward_layers: hidden width differs from n_embd");
  const int64_t T = hidden.rows();
  for (int64_t l = l_begin; l < l_end; ++l) {
    if (impl_->caches[l].latent.rows() != pos0)
      throw std::invalid_argument("forward_layers: layer " + std::to_string(l) + " caches hold " +
                                  std::to_string(impl_->caches[l].latent.rows()) + " positions, not pos0 = " +
                                  std::to_string(pos0));
  }
  Weights<S>& W = impl_->w;
  // Per layer: our own selection (recorded) and the one attention uses (forced, or our own).
  std::vector<std::optional<TopK>> sel(static_cast<size_t>(n_run)), used_sel(static_cast<size_t>(n_run));
  Mat<S> h = hidden;
  for (int64_t l = l_begin; l < l_end; ++l) {
    auto& lc = impl_->caches[l];
    LayerCtx<S> L{c_, opt_, W, impl_->inv_freq, impl_->attn_scale, trace, l, pos0, {}, forced};
    for (int64_t t = 0; t < T; ++t) L.pos.push_back(pos0 + t);
    rec<S>(trace, l, op::kInputHidden, h, {T, c_.n_embd});

    // Attention block.
    tick(trace, l, 0.0, "projections");
    Mat<S> x = rmsnorm<S>(h, W.vec(blk(l, wname::kAttnNorm)), c_.rms_eps);  // [T, E]
    rec<S>(trace, l, op::kAttnNormOut, x, {T, c_.n_embd});
    Mat<S> qa = linear<S>(x, W.mat(blk(l, wname::kQA)));                       // [T, q_lora]
    rec<S>(trace, l, op::kQA, qa, {T, c_.q_lora_rank});
    Mat<S> cq = rmsnorm<S>(qa, W.vec(blk(l, wname::kQANorm)), c_.rms_eps);    // [T, q_lora]
    rec<S>(trace, l, op::kQANorm, cq, {T, c_.q_lora_rank});
    tick(trace, l, kAtAttention / 6, "q and kv projections");
    Mat<S> q = mla_project<S>(L, x, cq, lc.latent);

    const int64_t src = c_.indexer_source_layer(l);
    tick(trace, l, kAtAttention / 2, "indexer");
    if (src == l) {
      sel[l] = indexer_select<S>(L, x, cq, lc.index_key);
      used_sel[l] = sel[l];
      if (const int32_t* f = forced ? forced->topk_of(static_cast<int>(l), T, c_.indexer_top_k) : nullptr)
        used_sel[l]->idx = forced_rows(f, T, c_.indexer_top_k, "indexer_topk", l, -1, [&](int64_t t) { return pos0 + t; });
    } else if (src < l_begin || !sel[src]) {
      throw InputError("forward_layers: layer " + std::to_string(l) + " reuses the selection of layer " +
                       std::to_string(src) + ", which is outside the range [" + std::to_string(l_begin) + ", " +
                       std::to_string(l_end) + ")");
    } else {
      sel[l] = *sel[src];
      used_sel[l] = *used_sel[src];
    }
    // A layer that shares its source's selection records it with its tie flags and gaps, so that a judge
    // reading this layer alone knows its near-ties.
    rec_i32(trace, l, op::kIndexerTopk, sel[l]->idx);
    rec_vec_i32(trace, l, op::kIndexerTopkTie, sel[l]->tie);
    rec_vec(trace, l, op::kIndexerTopkGap, sel[l]->gap);
    const TopK used = opt_.dense_attention ? dense_selection(T, pos0) : *used_sel[l];
    tick(trace, l, kAtAttention, "attention " + of(0, T, "rows"));
    Mat<S> ov = mla_attend<S>(L, q, lc.latent.view(), used, opt_.mla_form);  // [T, H*v]
    // The output projection (GLM-5: 16384 -> 6144, the largest dense product) in pieces of query rows, so
    // that progress moves during it; each row's values do not depend on the piece (threads.h).
    const Mat<S>& w_o = W.mat(blk(l, wname::kAttnOut));
    Mat<S> attn(T, c_.n_embd);  // [T, E]
    for (int64_t r0 = 0; r0 < T; r0 += kOutProjRows) {
      const int64_t n = std::min(kOutProjRows, T - r0);
      attn.middleRows(r0, n) = linear<S>(ov.middleRows(r0, n), w_o);
      tick(trace, l, kAtOutProj + (kAtFfn - kAtOutProj) * double(r0 + n) / double(T), "output projection " + of(r0 + n, T, "rows"));
    }
    tick(trace, l, kAtFfn, "ffn");
    rec<S>(trace, l, op::kAttnOut, attn, {T, c_.n_embd});
    Mat<S> a = h + attn;
    // The attention weights are done with for this pass: drop them before the FFN's are dequantized.
    if (opt_.release_layer_weights) W.release_layer(l);

    // FFN block.
    Mat<S> y = rmsnorm<S>(a, W.vec(blk(l, wname::kFfnNorm)), c_.rms_eps);
    rec<S>(trace, l, op::kFfnNormOut, y, {T, c_.n_embd});
    Mat<S> mlp = c_.is_moe_layer(l) ? moe_forward<S>(L, y)
                                    : swiglu_mlp<S>(y, W.mat(blk(l, wname::kFfnGate)), W.mat(blk(l, wname::kFfnUp)),
                                                    W.mat(blk(l, wname::kFfnDown)));
    rec<S>(trace, l, op::kMlpOut, mlp, {T, c_.n_embd});
    h = a + mlp;
    rec<S>(trace, l, op::kOutputHidden, h, {T, c_.n_embd});
    if (opt_.release_layer_weights) W.release_layer(l);
  }
  return h;
}

template <class S>
Mat<S> Model<S>::forward(std::span<const int32_t> ids, Trace* trace, const ForcedDecisions* forced) {
  if (ids.empty()) throw std::invalid_argument("forward: no tokens");
  Mat<S> h = embed(ids);
  h = forward_layers(h, n_past_, 0, c_.n_layer_run(), trace, forced);
  n_past_ += static_cast<int64_t>(ids.size());
  return head(h, trace);
}

template <class S>
Mat<S> Model<S>::forward_last(std::span<const int32_t> ids, Trace* trace, const ForcedDecisions* forced) {
  if (ids.empty()) throw std::invalid_argument("forward_last: no tokens");
  Mat<S> h = embed(ids);
  h = forward_layers(h, n_past_, 0, c_.n_layer_run(), trace, forced);
  n_past_ += static_cast<int64_t>(ids.size());
  return head(Mat<S>(h.bottomRows(1)), trace);
}

template <class S>
GenerateResult Model<S>::generate(std::span<const int32_t> prompt, int64_t n_new, const StepCallback& on_step,
                                  Trace* trace) {
  GenerateResult r;
  if (n_new <= 0) return r;
  if (prompt.empty()) throw std::invalid_argument("generate: empty prompt");
  Mat<S> logits = forward_last(prompt, trace);
  for (int64_t step = 0; step < n_new; ++step) {
    double margin = 0;
    const int32_t tok = argmax_lower<S>(logits.row(logits.rows() - 1).transpose(), &margin);
    r.tokens.push_back(tok);
    r.margins.push_back(margin);
    if (on_step) on_step(step, tok, margin);
    if (step + 1 < n_new) logits = forward_last(std::span<const int32_t>(&tok, 1), trace);
  }
  return r;
}

template int32_t argmax_lower<float>(const Eigen::Ref<const Vec<float>>&, double*);
template int32_t argmax_lower<double>(const Eigen::Ref<const Vec<double>>&, double*);
template class Model<float>;
template class Model<double>;

}  // namespace mlaconf::ref
