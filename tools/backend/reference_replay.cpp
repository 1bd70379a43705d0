// mlaconf tools/backend: op replay on the Eigen reference (see reference_replay.h).
//
// Each op calls the reference/ function that reference/model.cpp's forward pass runs for that step
// (ops.h, mla.h, indexer.h, moe.h: same eps, RoPE style and frequencies, absorbed form, expert order),
// on the exact inputs a fixture holds, converted to the backend's scalar S. This file reads and checks
// the inputs and cuts the outputs into the fixture's datasets; the only sums it does itself are the
// residual adds and mlp_out's mix of the given expert outputs, which no reference function takes apart.
// Only the inputs differ from a forward pass: they are the expected file's, so nothing compounds from
// one op to the next.
#include "tools/backend/reference_replay.h"

#include <cmath>
#include <functional>
#include <limits>

#include "core/error.h"
#include "core/trace.h"
#include "core/weight_layout.h"
#include "reference/indexer.h"
#include "reference/mla.h"
#include "reference/model.h"
#include "reference/moe.h"
#include "reference/weights.h"

namespace mlaconf::be {
namespace {

using ref::Mat;
using ref::MatI;
using ref::Vec;

int64_t width_of(const HostTensor& t) {
  int64_t w = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) w *= t.shape[i];
  return w;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

const HostTensor& input(const Tensors& in, const char* name, int64_t width, const std::string& op) {
  auto it = in.find(name);
  if (it == in.end()) throw InputError("op replay of " + op + ": input " + name + " is missing");
  const HostTensor& t = it->second;
  if (t.shape.empty() || width_of(t) != width || static_cast<int64_t>(t.v.size()) != t.rows() * width)
    throw InputError("op replay of " + op + ": input " + name + " has shape " + shape_str(t.shape) + ", expected [rows, " +
                     std::to_string(width) + " values]");
  return t;
}

template <class S>
Mat<S> to_mat(const HostTensor& t) {
  const int64_t w = width_of(t);
  Mat<S> m(t.rows(), w);
  for (int64_t i = 0; i < t.rows() * w; ++i) m.data()[i] = static_cast<S>(t.v[static_cast<size_t>(i)]);
  return m;
}

MatI to_mati(const HostTensor& t) {
  const int64_t w = width_of(t);
  MatI m(t.rows(), w);
  for (int64_t i = 0; i < t.rows() * w; ++i) m.data()[i] = static_cast<int32_t>(t.v[static_cast<size_t>(i)]);
  return m;
}

template <class M>
HostTensor host(const M& m, std::vector<int64_t> shape) {
  HostTensor h;
  h.shape = std::move(shape);
  h.v.resize(static_cast<size_t>(m.size()));
  for (Eigen::Index i = 0; i < m.size(); ++i) h.v[static_cast<size_t>(i)] = static_cast<double>(m.data()[i]);
  return h;
}

template <class T>
HostTensor host_vec(const std::vector<T>& v) {
  HostTensor h;
  h.shape = {static_cast<int64_t>(v.size())};
  h.v.assign(v.begin(), v.end());
  return h;
}

std::string blk(int64_t l, const char* s) { return wname::blk(l, s); }

}  // namespace

template <class S>
struct ReferenceReplay<S>::Impl {
  const GgufFile& f;
  ModelConfig c;
  ref::Weights<S> W;
  Eigen::VectorXd inv_freq;
  double scale;
  bool dense_attention;

  // A small expert budget is enough: replay runs each op once.
  Impl(const GgufFile& file, const ModelConfig& cfg, bool dense)
      : f(file),
        c(cfg),
        W(file, cfg, size_t(1) << 30),
        inv_freq(ref::model_rope_inv_freq(cfg)),
        scale(ref::model_attn_scale(cfg)),
        dense_attention(dense) {}

  std::vector<int64_t> positions(int64_t pos0, int64_t T) const {
    std::vector<int64_t> p(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) p[t] = pos0 + t;
    return p;
  }

  Tensors run(int l, const std::string& op, const Tensors& in, int64_t pos0);
  // Each answers the ops of one part of the layer into `out` (false: not one of its ops).
  bool query_op(int l, const std::string& op, const Tensors& in, int64_t pos0, Tensors& out);
  bool indexer_op(int l, const std::string& op, const Tensors& in, int64_t pos0, Tensors& out);
  bool attention_op(int l, const std::string& op, const Tensors& in, int64_t pos0, Tensors& out);
  bool ffn_op(int l, const std::string& op, const Tensors& in, int64_t pos0, Tensors& out);
};

// The attention's inputs: the norm, the query path, the latent cache row and the absorbed query.
template <class S>
bool ReferenceReplay<S>::Impl::query_op(int l, const std::string& op, const Tensors& in, int64_t pos0, Tensors& out) {
  const int64_t E = c.n_embd, H = c.n_head, dn = c.qk_nope(), R = c.qk_rope(), dq = c.qk_head(), dl = c.kv_lora_rank;
  const int64_t Q = c.q_lora_rank;
  auto M = [&](const char* name, int64_t width) { return to_mat<S>(input(in, name, width, op)); };
  if (op == op::kAttnNormOut) {
    Mat<S> h = M(op::kInputHidden, E);
    out[op] = host(ref::rmsnorm<S>(h, W.vec(blk(l, wname::kAttnNorm)), c.rms_eps), {h.rows(), E});
  } else if (op == op::kQA) {
    Mat<S> x = M(op::kAttnNormOut, E);
    out[op] = host(ref::linear<S>(x, W.mat(blk(l, wname::kQA))), {x.rows(), Q});
  } else if (op == op::kQANorm) {
    Mat<S> qa = M(op::kQA, Q);
    out[op] = host(ref::rmsnorm<S>(qa, W.vec(blk(l, wname::kQANorm)), c.rms_eps), {qa.rows(), Q});
  } else if (op == op::kQB) {
    Mat<S> cq = M(op::kQANorm, Q);
    out[op] = host(ref::linear<S>(cq, W.mat(blk(l, wname::kQB))), {cq.rows(), H, dq});
  } else if (op == op::kQPeRope) {
    Mat<S> q = M(op::kQB, H * dq);
    const int64_t T = q.rows();
    const auto pos = positions(pos0, T);
    ref::rope_heads_inplace<S>(q, H, dq, dn, pos.data(), inv_freq, ref::RopeStyle::Interleaved);
    Mat<S> qpe(T, H * R);
    for (int64_t h = 0; h < H; ++h) qpe.middleCols(h * R, R) = q.middleCols(h * dq + dn, R);
    out[op] = host(qpe, {T, H, R});
  } else if (op == op::kKvA) {
    Mat<S> x = M(op::kAttnNormOut, E);
    out[op] = host(ref::linear<S>(x, W.mat(blk(l, wname::kKvA))), {x.rows(), dl + R});
  } else if (op == op::kKvLatent || op == op::kKPeRope) {
    // Both halves of the latent cache row [RMSNorm(c) | RoPE(k_pe)]; each op answers its own.
    Mat<S> kva = M(op::kKvA, dl + R);
    const auto pos = positions(pos0, kva.rows());
    Mat<S> lat = ref::mla_latent<S>(kva, W.vec(blk(l, wname::kKvANorm)), c.rms_eps, pos.data(), inv_freq);
    if (op == op::kKvLatent) out[op] = host(Mat<S>(lat.leftCols(dl)), {kva.rows(), dl});
    else out[op] = host(Mat<S>(lat.rightCols(R)), {kva.rows(), R});
  } else if (op == op::kQAbsorbed) {
    // The roped query the model absorbs: q_b with each head's rope values taken from the given q_pe_rope.
    Mat<S> q = M(op::kQB, H * dq), qpe = M(op::kQPeRope, H * R);
    if (qpe.rows() != q.rows()) throw InputError("op replay of q_absorbed: q_b and q_pe_rope rows differ");
    const auto& kb = W.per_head(blk(l, wname::kKB));
    if (static_cast<int64_t>(kb.size()) != H) throw InputError(f.path() + ": attn_k_b head count differs from the config");
    for (int64_t h = 0; h < H; ++h) q.middleCols(h * dq + dn, R) = qpe.middleCols(h * R, R);
    out[op] = host(ref::absorb_query_rows<S>(q, kb, dn), {q.rows(), H, dl + R});
  } else {
    return false;
  }
  return true;
}

// The indexer: its query, keys, weights, scores and top-k.
template <class S>
bool ReferenceReplay<S>::Impl::indexer_op(int l, const std::string& op, const Tensors& in, int64_t pos0, Tensors& out) {
  const int64_t E = c.n_embd, Q = c.q_lora_rank, Hi = c.indexer_n_head, Di = c.indexer_head_size, K = c.indexer_top_k;
  const ref::RopeStyle idx_style = c.indexer_neox() ? ref::RopeStyle::NeoX : ref::RopeStyle::Interleaved;
  auto M = [&](const char* name, int64_t width) { return to_mat<S>(input(in, name, width, op)); };
  if (op == op::kIndexerQ) {
    Mat<S> cq = M(op::kQANorm, Q);
    const auto pos = positions(pos0, cq.rows());
    Mat<S> qi = ref::indexer_queries<S>(cq, W.mat(blk(l, wname::kIdxQB)), Hi, pos.data(), inv_freq, idx_style);
    out[op] = host(qi, {qi.rows(), Hi, Di});
  } else if (op == op::kIndexerK) {
    // The T new keys at positions pos0.. after the S - T earlier rows of the cache given.
    Mat<S> x = M(op::kAttnNormOut, E), keys = M(op::kIndexerK, Di);
    const int64_t T = x.rows(), S_ = keys.rows();
    if (S_ != pos0 + T)
      throw InputError("op replay of indexer_k: the cache given holds " + std::to_string(S_) + " rows, not pos0 + T = " +
                       std::to_string(pos0 + T));
    const auto pos = positions(pos0, T);
    keys.bottomRows(T) = ref::indexer_keys<S>(x, W.mat(blk(l, wname::kIdxK)), W.vec(blk(l, wname::kIdxKNorm)),
                                              W.vec(blk(l, wname::kIdxKNormB)), pos.data(), inv_freq, idx_style);
    out[op] = host(keys, {S_, Di});
  } else if (op == op::kIndexerWeights) {
    Mat<S> x = M(op::kAttnNormOut, E);
    out[op] = host(ref::linear<S>(x, W.mat(blk(l, wname::kIdxProj))), {x.rows(), Hi});
  } else if (op == op::kIndexerScores) {
    Mat<S> qi = M(op::kIndexerQ, Hi * Di), k = M(op::kIndexerK, Di), w = M(op::kIndexerWeights, Hi);
    if (w.rows() != qi.rows()) throw InputError("op replay of indexer_scores: indexer_q and indexer_weights rows differ");
    Mat<S> scores = ref::indexer_scores<S>(qi, k, w, Hi, pos0);
    out[op] = host(scores, {scores.rows(), scores.cols()});
  } else if (op == op::kIndexerTopk) {
    auto it = in.find(op::kIndexerScores);
    Mat<S> scores = M(op::kIndexerScores, it == in.end() ? 0 : width_of(it->second));  // [T, S]: any S
    ref::TopK sel = ref::topk_lower_index<S>(scores, K);
    out[op::kIndexerTopk] = host(sel.idx, {sel.idx.rows(), K});
    out[op::kIndexerTopkTie] = host_vec(sel.tie);
    out[op::kIndexerTopkGap] = host_vec(sel.gap);
  } else {
    return false;
  }
  return true;
}

// The sparse attention over the selected cache rows, the value up-projection and the output projection.
template <class S>
bool ReferenceReplay<S>::Impl::attention_op(int l, const std::string& op, const Tensors& in, int64_t pos0, Tensors& out) {
  const int64_t E = c.n_embd, H = c.n_head, R = c.qk_rope(), dl = c.kv_lora_rank, K = c.indexer_top_k, dv = c.v_head();
  auto M = [&](const char* name, int64_t width) { return to_mat<S>(input(in, name, width, op)); };
  if (op == op::kAttnLatentOut) {
    Mat<S> qabs = M(op::kQAbsorbed, H * (dl + R)), cache = M(op::kLatentCache, dl + R);
    MatI idx = to_mati(input(in, op::kIndexerTopk, K, op));
    const int64_t T = qabs.rows();
    if (dense_attention) idx = ref::dense_selection(T, pos0).idx;  // the negative control: every causal row
    if (idx.rows() != T) throw InputError("op replay of attn_latent_out: q_absorbed and indexer_topk rows differ");
    for (Eigen::Index i = 0; i < idx.size(); ++i)
      if (idx.data()[i] < -1 || idx.data()[i] >= cache.rows())
        throw InputError("op replay of attn_latent_out: indexer_topk entry " + std::to_string(idx.data()[i]) + " is outside the " +
                         std::to_string(cache.rows()) + "-row cache");
    out[op] = host(ref::sparse_mla_absorbed_rows<S>(qabs, cache, idx, dl, scale), {T, H, dl});
  } else if (op == op::kAttnVOut) {
    Mat<S> olat = M(op::kAttnLatentOut, H * dl);
    const auto& vb = W.per_head(blk(l, wname::kVB));
    if (static_cast<int64_t>(vb.size()) != H) throw InputError(f.path() + ": attn_v_b head count differs from the config");
    out[op] = host(ref::apply_v_up_rows<S>(olat, vb), {olat.rows(), H, dv});
  } else if (op == op::kAttnOut) {
    Mat<S> v = M(op::kAttnVOut, H * dv);
    out[op] = host(ref::linear<S>(v, W.mat(blk(l, wname::kAttnOut))), {v.rows(), E});
  } else {
    return false;
  }
  return true;
}

// The FFN: its norm, the router, the experts, the shared expert or the dense MLP, and the layer's output.
template <class S>
bool ReferenceReplay<S>::Impl::ffn_op(int l, const std::string& op, const Tensors& in, int64_t pos0, Tensors& out) {
  const int64_t E = c.n_embd, U = c.n_expert_used, X = c.n_expert;
  auto M = [&](const char* name, int64_t width) { return to_mat<S>(input(in, name, width, op)); };
  if (op == op::kFfnNormOut) {
    Mat<S> h = M(op::kInputHidden, E), attn = M(op::kAttnOut, E);
    if (h.rows() != attn.rows()) throw InputError("op replay of ffn_norm_out: input_hidden and attn_out rows differ");
    Mat<S> a = h + attn;
    out[op] = host(ref::rmsnorm<S>(a, W.vec(blk(l, wname::kFfnNorm)), c.rms_eps), {a.rows(), E});
  } else if (op == op::kRouterLogits) {
    Mat<S> y = M(op::kFfnNormOut, E);
    out[op] = host(ref::linear<S>(y, W.mat(blk(l, wname::kGateInp))), {y.rows(), X});
  } else if (op == op::kRouterIds) {
    Mat<S> logits = M(op::kRouterLogits, X);
    const std::string bias_name = blk(l, wname::kExpProbsB);
    Vec<S> bias = W.has(bias_name) ? W.vec(bias_name) : Vec<S>();
    ref::Route<S> r = ref::moe_route<S>(logits, bias, ref::RouterParams::from(c));
    out[op::kRouterIds] = host(r.ids, {r.ids.rows(), U});
    out[op::kRouterWeights] = host(r.weights, {r.weights.rows(), U});
    out[op::kRouterTopkGap] = host_vec(r.gap);
  } else if (op == op::kExpertOut) {
    // moe_ffn's expert_out (each used expert once over its tokens, written to its (token, slot)); its
    // mixture is mlp_out's op, not this one's, so the weights it is given do not matter: zeros.
    Mat<S> y = M(op::kFfnNormOut, E);
    MatI ids = to_mati(input(in, op::kRouterIds, U, op));
    const int64_t T = y.rows();
    if (ids.rows() != T) throw InputError("op replay of expert_out: ffn_norm_out and router_ids rows differ");
    for (Eigen::Index i = 0; i < ids.size(); ++i)
      if (ids.data()[i] < 0 || ids.data()[i] >= X)
        throw InputError("op replay of expert_out: router_ids entry " + std::to_string(ids.data()[i]) + " is not an expert id");
    const ref::ExpertSource<S> expert = [&](int64_t e) {
      const ref::ExpertWeights<S>& ew = W.expert(l, e);
      return ref::ExpertRef<S>{ew.gate, ew.up, ew.down};
    };
    Mat<S> eo;
    ref::moe_ffn<S>(y, ids, Mat<S>::Zero(T, U), expert, nullptr, &eo);
    out[op] = host(eo, {T, U, E});
  } else if (op == op::kSharedExpertOut) {
    Mat<S> y = M(op::kFfnNormOut, E);
    out[op] = host(ref::swiglu_mlp<S>(y, W.mat(blk(l, wname::kGateShexp)), W.mat(blk(l, wname::kUpShexp)),
                                      W.mat(blk(l, wname::kDownShexp))),
                   {y.rows(), E});
  } else if (op == op::kMlpOut && c.is_dense_layer(l)) {
    Mat<S> y = M(op::kFfnNormOut, E);
    out[op] = host(ref::swiglu_mlp<S>(y, W.mat(blk(l, wname::kFfnGate)), W.mat(blk(l, wname::kFfnUp)), W.mat(blk(l, wname::kFfnDown))),
                   {y.rows(), E});
  } else if (op == op::kMlpOut) {
    // Σ_j weight(t,j) expert_out(t,j) in slot order (= ascending expert id, moe_forward's order), then + shared.
    Mat<S> eo = M(op::kExpertOut, U * E), w = M(op::kRouterWeights, U);
    const int64_t T = eo.rows();
    if (w.rows() != T) throw InputError("op replay of mlp_out: expert_out and router_weights rows differ");
    Mat<S> m = Mat<S>::Zero(T, E);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < U; ++j) m.row(t) += w(t, j) * eo.row(t).segment(j * E, E);
    if (c.n_expert_shared > 0) {
      Mat<S> sh = M(op::kSharedExpertOut, E);
      if (sh.rows() != T) throw InputError("op replay of mlp_out: shared_expert_out rows differ");
      m += sh;
    }
    out[op] = host(m, {T, E});
  } else if (op == op::kOutputHidden) {
    Mat<S> h = M(op::kInputHidden, E), attn = M(op::kAttnOut, E), mlp = M(op::kMlpOut, E);
    if (attn.rows() != h.rows() || mlp.rows() != h.rows()) throw InputError("op replay of output_hidden: input rows differ");
    Mat<S> a = h + attn;
    Mat<S> o = a + mlp;
    out[op] = host(o, {h.rows(), E});
  } else {
    return false;
  }
  return true;
}

template <class S>
Tensors ReferenceReplay<S>::Impl::run(int l, const std::string& op, const Tensors& in, int64_t pos0) {
  if (l < 0 || l >= c.n_layer_run()) throw InputError("op replay: layer " + std::to_string(l) + " is outside the model");
  if (pos0 < 0) throw InputError("op replay: negative pos0");
  Tensors out;
  if (!query_op(l, op, in, pos0, out) && !indexer_op(l, op, in, pos0, out) && !attention_op(l, op, in, pos0, out) &&
      !ffn_op(l, op, in, pos0, out))
    throw InputError("op replay: unknown op '" + op + "'");
  return out;
}

template <class S>
ReferenceReplay<S>::ReferenceReplay(const GgufFile& f, const ModelConfig& c, bool dense_attention)
    : impl_(new Impl(f, c, dense_attention)) {}
template <class S>
ReferenceReplay<S>::~ReferenceReplay() = default;

template <class S>
Tensors ReferenceReplay<S>::run(int layer, const std::string& op, const Tensors& in, int64_t pos0) {
  return impl_->run(layer, op, in, pos0);
}

template class ReferenceReplay<float>;
template class ReferenceReplay<double>;

}  // namespace mlaconf::be
