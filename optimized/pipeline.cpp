// mlaconf optimized: the GLM-5 forward pass, composed from the kernels of api.h (host code only).
#include "optimized/pipeline.h"

#include "optimized/pipeline_impl.h"

namespace mlaconf::cuda {

Pipeline::Pipeline(const GgufFile& f, const ModelConfig& c, PipelineOptions opt) : impl_(std::make_unique<Impl>(f, c, opt)) {
  std::string why;
  if (!cuda_available(&why)) throw CudaError("not supported: " + why);
  c.validate(f.path());
  validate_weights(f, c);
  if (c.rope_scaling_factor > 1.0)
    throw NotSupported(f.path() + ": YaRN RoPE scaling (factor " + std::to_string(c.rope_scaling_factor) +
                     ") in the CUDA pipeline");
  Impl& m = *impl_;
  if (opt.max_seqs < 0 || opt.max_seqs > 65535 || opt.page_rows < 1 || opt.pool_pages < 0 || opt.pass_arena_bytes < 0)
    throw InputError("PipelineOptions: max_seqs in [0, 65535], page_rows >= 1, pool_pages >= 0 and pass_arena_bytes >= 0");
  m.ctx = std::min<int64_t>(opt.max_ctx, c.n_ctx_train > 0 ? c.n_ctx_train : opt.max_ctx);
  m.attn_scale = 1.0 / std::sqrt((double)c.qk_head());
  DeviceScope keep(current_device());  // the constructor leaves the caller's device current
  m.plan_split();
  m.upload_weights();
  for (int64_t l = 0; l < c.n_layer_run(); ++l) {
    DeviceScope on(m.stage_dev[(size_t)m.layer_stage[(size_t)l]]);
    m.latent.emplace_back((size_t)m.ctx * c.latent_dim() * 2);
    const bool full = c.is_full_indexer_layer(l);
    m.ikeys.emplace_back(full ? (size_t)m.ctx * c.indexer_head_size * 4 : 0);
  }
  if (opt.max_seqs > 0) {  // batched decode: the shared paged pool and the slots' key regions
    m.page_rows = opt.page_rows;
    m.max_pages = (m.ctx + m.page_rows - 1) / m.page_rows;
    const int64_t pages = opt.pool_pages > 0 ? opt.pool_pages : opt.max_seqs * m.max_pages;
    m.pool_rows = pages * m.page_rows;
    if (m.pool_rows > INT32_MAX || opt.max_seqs * m.ctx > INT32_MAX)
      throw InputError("PipelineOptions: the paged cache (" + std::to_string(m.pool_rows) + " rows) and the key regions (" +
                       std::to_string(opt.max_seqs * m.ctx) + " rows) must stay below 2^31 rows");
    for (int64_t l = 0; l < c.n_layer_run(); ++l) {
      DeviceScope on(m.stage_dev[(size_t)m.layer_stage[(size_t)l]]);
      m.pool.emplace_back((size_t)m.pool_rows * c.latent_dim() * 2);
      const bool full = c.is_full_indexer_layer(l);
      m.skeys.emplace_back(full ? (size_t)opt.max_seqs * m.ctx * c.indexer_head_size * 4 : 0);
    }
    m.seqs.resize((size_t)opt.max_seqs);
    for (int64_t p = pages - 1; p >= 0; --p) m.free_pages.push_back((int32_t)p);
  }
}
Pipeline::~Pipeline() = default;
Pipeline::Pipeline(Pipeline&&) noexcept = default;
int64_t Pipeline::n_past() const { return impl_->n_past; }
const ModelConfig& Pipeline::config() const { return impl_->c; }
const PipelineOptions& Pipeline::options() const { return impl_->opt; }
std::string Pipeline::split_summary() const {
  const Impl& m = *impl_;
  if (m.opt.devices.empty()) return "";
  std::string s = "devices ";
  for (size_t i = 0; i < m.stage_dev.size(); ++i) s += (i ? "," : "") + std::to_string(m.stage_dev[i]);
  s += ": layers ";
  for (size_t i = 0; i < m.stage_layers.size(); ++i) {
    const auto [b, e] = m.stage_layers[i];
    s += (i ? " | " : "") + (e <= b ? std::string("-") : e - b == 1 ? std::to_string(b) : std::to_string(b) + "-" + std::to_string(e - 1));
  }
  return s;
}
void Pipeline::reset() { impl_->n_past = 0; }

std::vector<float> Pipeline::forward(std::span<const int32_t> ids, Trace* trace, const ForcedDecisions* forced) {
  Impl& m = *impl_;
  const int64_t T = ids.size();
  if (T == 0) return {};
  m.check_ids(ids);
  if (m.n_past + T > m.ctx)
    throw InputError("context full: " + std::to_string(m.n_past) + " + " + std::to_string(T) + " tokens exceed the " +
                     std::to_string(m.ctx) + "-row caches (PipelineOptions::max_ctx)");
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = (int32_t)(m.n_past + t);
  m.tr = trace;
  m.forced = forced;
  std::vector<float> out;
  try {
    PassArenas::Scope pass(m.arenas, m.stage_dev);  // the pass's temporaries
    out = m.run_pass(ids, pos);
  } catch (...) {
    m.tr = nullptr;
    m.forced = nullptr;
    throw;
  }
  m.n_past += T;
  m.tr = nullptr;
  m.forced = nullptr;
  return out;
}

void Pipeline::Impl::check_ids(std::span<const int32_t> ids) const {
  for (int32_t id : ids)
    if (id < 0 || id >= c.n_vocab) throw InputError("token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(c.n_vocab));
}

// One pass of T rows at positions pos (forward(): n_past..; a pass over sequences: `sr` places them):
// the embedding, every layer on its stage, the final norm and the head. Logits [T, vocab] on the host.
std::vector<float> Pipeline::Impl::run_pass(std::span<const int32_t> ids, const std::vector<int32_t>& pos) {
  Impl& m = *this;
  const int64_t T = ids.size(), E = c.n_embd;
  m.own_topk.clear();
  m.own_tie.clear();
  m.own_gap.clear();
  DeviceScope keep(current_device());  // the pass switches devices per stage; the caller's comes back
  const int n_stages = (int)m.stage_dev.size();
  const bool graph_shape = m.sr && m.sr->graph_shape;  // one stage, inputs and logits in device buffers
  // Per stage, on its device: the rows' token ids and positions. A pass over sequences brings them
  // with its tables; forward() uploads them here, one async copy per stage.
  std::vector<const int32_t*> d_ids, d_pos;
  std::vector<DeviceBuffer> inputs;
  if (m.sr) {
    d_ids = m.sr->ids_at, d_pos = m.sr->pos_at;
  } else {
    for (int s = 0; s < n_stages; ++s) {
      DeviceScope on(m.stage_dev[(size_t)s]);
      PinnedUpload& up = m.uploads[(size_t)s];
      up.clear();
      const size_t o_ids = up.add(ids.data(), ids.size() * 4), o_pos = up.add(pos.data(), pos.size() * 4);
      inputs.push_back(upload_temp(up));
      d_ids.push_back(reinterpret_cast<const int32_t*>(inputs.back().as<char>() + o_ids));
      d_pos.push_back(reinterpret_cast<const int32_t*>(inputs.back().as<char>() + o_pos));
    }
  }
  std::vector<DeviceBuffer> retired;  // buffers a stage hand-off left behind
  m.cur = 0;
  m.topk_at = m.layer_stage;  // a layer's own top-k list is made on its stage
  set_device(m.stage_dev[0]);
  auto h = Impl::fbuf(T * E);
  const DevTensor& emb = m.W(wname::kTokenEmbd);
  // One launch for the T rows (dequantize_f32's formula per value: the same bits as row by row).
  embed_rows(emb.type, emb.buf.get(), emb.row_bytes, d_ids[0], T, E, h.as<float>());
  std::vector<DeviceBuffer> topk(c.n_layer_run());
  for (int64_t l = 0; l < c.n_layer_run(); ++l) {
    m.enter_stage(m.layer_stage[(size_t)l], h, T * E, topk, retired);
    m.layer(l, h.as<float>(), T, d_pos[(size_t)m.cur], topk);
  }
  m.enter_stage(n_stages - 1, h, T * E, topk, retired);
  auto fn = Impl::fbuf(T * E);
  rmsnorm(h.as<float>(), m.W(wname::kOutputNorm).buf.as<float>(), T, E, E, (float)c.rms_eps, fn.as<float>());
  m.done(-1, op::kFinalNorm, fn.as<float>(), {T, E});
  if (graph_shape) {  // the caller reads the logits after the pass (or the graph's replay)
    m.linear(m.W(wname::kOutput), fn.as<float>(), T, m.sr->d_logits);
    return {};
  }
  auto lg = Impl::fbuf(T * c.n_vocab);
  m.linear(m.W(wname::kOutput), fn.as<float>(), T, lg.as<float>());
  m.done(-1, op::kLogits, lg.as<float>(), {T, c.n_vocab});
  return m.logits_out(lg.as<float>(), T);
}

std::vector<int32_t> Pipeline::generate(std::span<const int32_t> prompt, int64_t n_new, std::vector<double>* margins,
                                        Trace* trace) {
  const int64_t V = impl_->c.n_vocab;
  std::vector<int32_t> toks;
  std::vector<float> lg = forward(prompt, trace);
  for (int64_t step = 0; step < n_new; ++step) {
    const float* row = lg.data() + lg.size() - V;
    int32_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (row[i] > row[best]) best = (int32_t)i;
    float second = -INFINITY;
    for (int64_t i = 0; i < V; ++i)
      if (i != best) second = std::max(second, row[i]);
    if (margins) margins->push_back((double)row[best] - (double)second);
    toks.push_back(best);
    if (step + 1 < n_new) lg = forward(std::span<const int32_t>(&toks.back(), 1), trace);
  }
  return toks;
}

std::vector<float> Pipeline::Impl::logits_out(const float* d_lg, int64_t T) {
  if (greedy_out) {
    DeviceBuffer d_ids((size_t)std::max<int64_t>(T, 1) * 4);
    argmax_rows(d_lg, T, c.n_vocab, d_ids.as<int32_t>());
    copy_to_host(greedy_out, d_ids.get(), (size_t)T * 4);
    return {};
  }
  std::vector<float> out((size_t)(T * c.n_vocab));
  copy_to_host(out.data(), d_lg, out.size() * 4);
  return out;
}

}  // namespace mlaconf::cuda
