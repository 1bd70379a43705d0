// mlaconf optimized: batched decode: sequence slots, passes over their rows, decode steps as CUDA graphs.
#include "optimized/pipeline_impl.h"

namespace mlaconf::cuda {

// Gives the rows' sequences their pages and computes the rows' host tables.
Pipeline::Impl::RowTables Pipeline::Impl::place(std::span<const int32_t> ids, const SeqRows& r) {
  const int64_t T = ids.size();
  check_ids(ids);
  for (size_t t = 0; t < r.slot.size(); ++t) {
    Seq& q = seqs[(size_t)r.slot[t]];
    if (r.pos[t] >= ctx)
      throw InputError("context full: sequence " + std::to_string(r.slot[t]) + " would reach " + std::to_string(r.pos[t] + 1) +
                       " rows, beyond PipelineOptions::max_ctx " + std::to_string(ctx));
    grow(q, r.pos[t] + 1);
  }
  // Each row's cache row, key row and key region, its group; the groups' page tables (-1 padded).
  RowTables h;
  h.lat.resize(T), h.key.resize(T), h.row_tab.resize(T), h.key_off.resize(T);
  h.tab.assign(r.groups.size() * (size_t)max_pages, -1);
  for (size_t g = 0; g < r.groups.size(); ++g) {
    const Seq& q = seqs[(size_t)r.slot[(size_t)r.groups[g].first]];
    std::copy(q.pages.begin(), q.pages.end(), h.tab.begin() + (int64_t)g * max_pages);
    for (int64_t t = r.groups[g].first; t < r.groups[g].second; ++t) h.row_tab[(size_t)t] = (int32_t)g;
  }
  for (int64_t t = 0; t < T; ++t) {
    h.lat[(size_t)t] = (int32_t)cache_row(seqs[(size_t)r.slot[(size_t)t]], r.pos[(size_t)t]);
    h.key[(size_t)t] = (int32_t)((int64_t)r.slot[(size_t)t] * ctx + r.pos[(size_t)t]);
    h.key_off[(size_t)t] = (int64_t)r.slot[(size_t)t] * ctx * c.indexer_head_size;
  }
  return h;
}

// The arrays in image order: ids, pos, lat, key, key_off, row_tab, tab (offsets in `off`).
void Pipeline::Impl::rows_image(PinnedUpload& up, std::span<const int32_t> ids, const RowTables& h, const SeqRows& r,
                                std::vector<size_t>& off) const {
  auto add = [&](const auto& v) { return up.add(v.data(), v.size() * sizeof(v[0])); };
  up.clear();
  off = {add(ids), add(r.pos), add(h.lat), add(h.key), add(h.key_off), add(h.row_tab), add(h.tab)};
}
void Pipeline::Impl::point_rows(SeqRows& r, const char* base, const std::vector<size_t>& off) {
  auto i32 = [&](size_t i) { return reinterpret_cast<const int32_t*>(base + off[i]); };
  r.ids_at.push_back(i32(0)), r.pos_at.push_back(i32(1)), r.lat_rows.push_back(i32(2)), r.key_rows.push_back(i32(3));
  r.key_off.push_back(reinterpret_cast<const int64_t*>(base + off[4]));
  r.row_tab.push_back(i32(5)), r.tab.push_back(i32(6));
}

// Runs rows r over their sequences (direct launches) and advances them. gemv_only: a decode step.
std::vector<float> Pipeline::Impl::seq_pass(std::span<const int32_t> ids, SeqRows& r, bool gemv_only) {
  const RowTables h = place(ids, r);
  std::vector<float> out;
  {
    PassArenas::Scope pass(arenas, stage_dev);  // the pass's temporaries, its inputs too
    std::vector<size_t> off;
    for (size_t s = 0; s < stage_dev.size(); ++s) {
      DeviceScope on(stage_dev[s]);
      rows_image(uploads[s], ids, h, r, off);
      r.owned.push_back(upload_temp(uploads[s]));
      point_rows(r, r.owned.back().as<char>(), off);
    }
    out = with_rows(r, gemv_only, [&] { return run_pass(ids, r.pos); });
    r.owned.clear();  // views of the arena: not past the pass
  }
  advance(r);
  return out;
}

// A decode step as a CUDA graph (one stage, no overflow check): the step's inputs are written to the
// persistent buffers of the B-row graph, then the graph replays. Its first step (and the first after a
// kernel's workspace moved) runs directly, shaped like the graph, so that every workspace has its size
// before the capture; the next one captures.
// Before the replay (or the warm run, or the capture, which drains the legacy stream first). The image has the
// same size at every step of this B (B rows, B groups of max_pages).
std::vector<size_t> Pipeline::Impl::upload_step_inputs(StepGraph& G, std::span<const int32_t> ids, const SeqRows& r) {
  const RowTables h = place(ids, r);
  std::vector<size_t> off;
  rows_image(uploads[0], ids, h, r, off);
  if (!G.inputs.get()) G.inputs = DeviceBuffer(uploads[0].bytes()), G.logits = DeviceBuffer((size_t)ids.size() * c.n_vocab * 4);
  if (G.inputs.bytes() != uploads[0].bytes()) throw CudaError("decode graph: the step's inputs changed size");
  uploads[0].upload(G.inputs.get());
  return off;
}

std::vector<float> Pipeline::Impl::graph_step(std::span<const int32_t> ids, SeqRows& r) {
  const int64_t B = ids.size();
  DeviceScope on(stage_dev[0]);
  StepGraph& G = step_graphs[B];
  const std::vector<size_t> off = upload_step_inputs(G, ids, r);
  point_rows(r, G.inputs.as<char>(), off);
  r.graph_shape = true;
  r.d_logits = G.logits.as<float>();
  const uint64_t gen = workspace_generation();
  if (G.graph.ready() && G.captured_gen != gen) G.graph = CudaGraph{};  // it holds moved workspaces
  const bool warm = !G.graph.ready() && G.warm_gen != gen;
  if (warm) {
    with_rows(r, true, [&] {
      PassArenas::Scope pass(arenas, {stage_dev[0]});  // sizes the arena for the capture (it grows after)
      return run_pass(ids, r.pos);
    });
  } else {
    if (!G.graph.ready()) {
      with_rows(r, true, [&] {
        G.graph.capture([&] {
          // The arena as the warm step sized it; the graph holds its poison memset (at the end).
          PassArenas::Scope pass(arenas, {stage_dev[0]});
          run_pass(ids, r.pos);
        });
        return std::vector<float>{};
      });
      G.captured_gen = gen;
      if (workspace_generation() != gen) {  // a workspace moved during the capture: never replay it
        G.graph = CudaGraph{};
        throw CudaError("decode graph: a kernel workspace was reallocated during the capture");
      }
    }
    G.graph.launch();
    ++graph_replays;
  }
  std::vector<float> out = logits_out(G.logits.as<float>(), B);
  // The warm step's generation is taken after its greedy picks: argmax_rows sizes its work memory there,
  // outside the graph, and a generation taken before it would make the next step warm again (the capture
  // one step late).
  if (warm) G.warm_gen = workspace_generation();
  advance(r);
  return out;
}

int Pipeline::open_sequence() {
  Impl& m = *impl_;
  m.require_batched();
  for (size_t s = 0; s < m.seqs.size(); ++s)
    if (!m.seqs[s].open) {
      m.seqs[s] = Impl::Seq{};
      m.seqs[s].open = true;
      return (int)s;
    }
  throw InputError("all " + std::to_string(m.seqs.size()) + " sequence slots are open (PipelineOptions::max_seqs)");
}

void Pipeline::close_sequence(int seq) {
  Impl& m = *impl_;
  Impl::Seq& q = m.open_seq(seq);
  for (auto it = q.pages.rbegin(); it != q.pages.rend(); ++it) m.free_pages.push_back(*it);
  q = Impl::Seq{};
}

int64_t Pipeline::sequence_length(int seq) const { return impl_->open_seq(seq).len; }
int64_t Pipeline::graph_replays() const { return impl_->graph_replays; }

std::vector<float> Pipeline::prefill(int seq, std::span<const int32_t> ids) {
  Impl& m = *impl_;
  Impl::Seq& q = m.open_seq(seq);
  const int64_t T = ids.size();
  if (T == 0) return {};
  Impl::SeqRows r;
  for (int64_t t = 0; t < T; ++t) {
    r.slot.push_back(seq);
    r.pos.push_back((int32_t)std::min<int64_t>(q.len + t, INT32_MAX));
  }
  r.groups.emplace_back(0, T);
  r.plan_queries = 0;  // as forward() plans these T rows
  return m.seq_pass(ids, r, false);
}

Pipeline::Impl::SeqRows Pipeline::Impl::step_rows(std::span<const int> seqs, std::span<const int32_t> ids) {
  require_batched();
  const int64_t B = seqs.size();
  if (B == 0 || (int64_t)ids.size() != B)
    throw InputError("decode_step: " + std::to_string(B) + " sequences and " + std::to_string(ids.size()) + " tokens (need one each, at least one)");
  if (B * c.n_head > 65535)
    throw InputError("decode_step: " + std::to_string(B) + " sequences x " + std::to_string(c.n_head) +
                     " heads exceed the 65535 per-head products of one pass");
  std::vector<char> seen(this->seqs.size(), 0);
  SeqRows r;
  for (int64_t b = 0; b < B; ++b) {
    const Seq& q = open_seq(seqs[(size_t)b]);
    if (seen[(size_t)seqs[(size_t)b]]++) throw InputError("decode_step: sequence " + std::to_string(seqs[(size_t)b]) + " appears twice");
    r.slot.push_back(seqs[(size_t)b]);
    r.pos.push_back((int32_t)std::min<int64_t>(q.len, INT32_MAX));
    r.groups.emplace_back(b, b + 1);
  }
  r.plan_queries = opt.batch_invariant ? 1 : 0;
  return r;
}

std::vector<float> Pipeline::decode_step(std::span<const int> seqs, std::span<const int32_t> ids) {
  Impl& m = *impl_;
  Impl::SeqRows r = m.step_rows(seqs, ids);
  if (m.opt.decode_graph && m.stage_dev.size() == 1 && !m.opt.overflow_check) return m.graph_step(ids, r);
  return m.seq_pass(ids, r, true);
}

std::vector<int32_t> Pipeline::decode_step_greedy(std::span<const int> seqs, std::span<const int32_t> ids) {
  std::vector<int32_t> picks(seqs.size());
  struct Reset {
    int32_t*& p;
    ~Reset() { p = nullptr; }
  } reset{impl_->greedy_out};
  impl_->greedy_out = picks.data();
  decode_step(seqs, ids);
  return picks;
}

namespace {
// A step's picks with a -1: a row whose logits were all NaN, a token the next step cannot take.
bool has_no_pick(const std::vector<int32_t>& picks) { return std::find(picks.begin(), picks.end(), -1) != picks.end(); }
}  // namespace

std::vector<std::vector<int32_t>> Pipeline::decode_steps_greedy(std::span<const int> seqs, std::span<const int32_t> ids,
                                                               int64_t n) {
  Impl& m = *impl_;
  if (n < 0) throw InputError("decode_steps_greedy: " + std::to_string(n) + " steps");
  m.step_rows(seqs, ids);  // the list checked before any step
  std::vector<std::vector<int32_t>> out;
  std::vector<int32_t> next(ids.begin(), ids.end());
  const bool graph = m.opt.decode_graph && m.stage_dev.size() == 1 && !m.opt.overflow_check;
  auto stopped = [&] { return !out.empty() && has_no_pick(out.back()); };
  // One by one until the B-row graph replays (its warm and capture steps), or throughout without graphs.
  while ((int64_t)out.size() < n && !stopped() && !(graph && m.step_graphs[(int64_t)seqs.size()].replays())) {
    out.push_back(decode_step_greedy(seqs, next));
    next = out.back();
  }
  if ((int64_t)out.size() < n && !stopped()) m.graph_chain(seqs, next, n - (int64_t)out.size(), out);
  return out;
}

// Step k + 1 is queued (its tables uploaded, its tokens fed from step k's picks on the device, its graph
// launched) before the host waits for step k's picks; the host then reads them while step k + 1 runs. The
// stream order is what makes it right: upload k + 1 -> feed (reads step k's picks) -> replay k + 1 -> argmax
// (writes the picks) -> download k + 1; so every step sees the tables and tokens a call of
// decode_step_greedy would have given it. A step queued behind one whose picks hold -1 (tokens 0 there,
// feed_picks) is discarded: the sequences go back one position (its cache rows lie beyond their lengths,
// overwritten by the next step that writes that position).
void Pipeline::Impl::graph_chain(std::span<const int> seqs, std::span<const int32_t> ids, int64_t n,
                                 std::vector<std::vector<int32_t>>& out) {
  const int64_t B = seqs.size(), V = c.n_vocab;
  DeviceScope on(stage_dev[0]);
  StepGraph& G = step_graphs[B];
  if (!G.picks.get()) G.picks = DeviceBuffer((size_t)B * 4);
  const std::vector<int32_t> zeros((size_t)B, 0);
  auto picked = [&](int64_t k) {
    const auto* p = static_cast<const int32_t*>(G.picks_host[k % 2].wait());
    return std::vector<int32_t>(p, p + B);
  };
  // Drains the queue on an error (each pending download waited for), so that no copy outlives its buffers.
  struct Drain {
    StepGraph& G;
    ~Drain() {
      for (auto& d : G.picks_host)
        if (d.pending()) try { d.wait(); } catch (...) {}
    }
  } drain{G};
  for (int64_t k = 0; k < n; ++k) {
    const std::span<const int32_t> tokens = k == 0 ? ids : std::span<const int32_t>(zeros);  // later: fed on the device
    SeqRows r = step_rows(seqs, tokens);
    if (!G.replays()) throw CudaError("decode graph: its workspaces moved during chained steps");
    const std::vector<size_t> off = upload_step_inputs(G, tokens, r);
    if (k > 0) feed_picks(G.picks.as<int32_t>(), B, reinterpret_cast<int32_t*>(G.inputs.as<char>() + off[0]));
    G.graph.launch();
    ++graph_replays;
    argmax_rows(G.logits.as<float>(), B, V, G.picks.as<int32_t>());
    G.picks_host[k % 2].start(G.picks.get(), (size_t)B * 4);
    advance(r);
    if (k == 0) continue;
    out.push_back(picked(k - 1));
    if (has_no_pick(out.back())) {
      picked(k);  // step k ran on tokens 0 in the -1 rows: discarded
      for (int s : seqs) --this->seqs[(size_t)s].len;
      return;
    }
  }
  if (n > 0) out.push_back(picked(n - 1));
}

void Pipeline::append_synthetic_context(int seq, int64_t n, uint64_t seed) {
  Impl& m = *impl_;
  Impl::Seq& q = m.open_seq(seq);
  if (n < 0 || q.len + n > m.ctx)
    throw InputError("append_synthetic_context: " + std::to_string(q.len) + " + " + std::to_string(n) + " rows exceed max_ctx " +
                     std::to_string(m.ctx));
  m.grow(q, q.len + n);
  const ModelConfig& c = m.c;
  const int64_t dlat = c.latent_dim(), Di = c.indexer_head_size;
  DeviceScope keep(current_device());
  for (int64_t l = 0; l < c.n_layer_run(); ++l) {
    set_device(m.stage_dev[(size_t)m.layer_stage[(size_t)l]]);
    const uint64_t s = seed * 0x9E3779B97F4A7C15ull + (uint64_t)l;
    for (int64_t p = q.len; p < q.len + n;) {  // run by run of one page
      const int64_t run = std::min<int64_t>(q.len + n - p, m.page_rows - p % m.page_rows);
      fill_pattern_f16(m.pool[(size_t)l].as<uint16_t>() + m.cache_row(q, p) * dlat, run, dlat, s + (uint64_t)p);
      p += run;
    }
    if (m.skeys[(size_t)l].get())
      fill_pattern_f32(m.skeys[(size_t)l].as<float>() + ((int64_t)seq * m.ctx + q.len) * Di, n, Di, s ^ 0x5bd1e995u);
  }
  q.len += n;
}

void Pipeline::Impl::grow(Seq& q, int64_t len) {
  while ((int64_t)q.pages.size() * page_rows < len) {
    if (free_pages.empty())
      throw InputError("the paged latent cache is full (" + std::to_string(pool_rows / page_rows) + " pages of " +
                       std::to_string(page_rows) + " rows; PipelineOptions::pool_pages)");
    q.pages.push_back(free_pages.back());
    free_pages.pop_back();
  }
}

void Pipeline::Impl::advance(const SeqRows& r) {
  for (size_t t = 0; t < r.slot.size(); ++t) {
    Seq& q = seqs[(size_t)r.slot[t]];
    q.len = std::max<int64_t>(q.len, r.pos[t] + 1);
  }
}

}  // namespace mlaconf::cuda
