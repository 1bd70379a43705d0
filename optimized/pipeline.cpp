// mlaconf optimized: the GLM-5 forward pass, composed from the kernels of api.h (host code only).
#include "optimized/pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include "core/error.h"
#include "core/memory_plan.h"
#include "core/weight_layout.h"
#include "optimized/api.h"
#include "optimized/arena.h"
#include "optimized/faults.h"
#include "optimized/staging.h"

namespace mlaconf::cuda {
namespace {

struct DevTensor {
  GgmlType type = GgmlType::F32;
  int64_t ne0 = 0, ne1 = 1, ne2 = 1;
  int64_t row_bytes = 0;
  DeviceBuffer buf;
  std::vector<float> host_f32;  // F32 vectors the host needs (router bias)
};

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

}  // namespace

struct Pipeline::Impl {
  const GgufFile& f;
  ModelConfig c;
  PipelineOptions opt;
  int64_t ctx = 0;
  int64_t n_past = 0;
  double attn_scale = 0;
  std::map<std::string, DevTensor> w;
  std::vector<DeviceBuffer> latent;  // per layer [ctx, kv_lora+rope] f16, on the layer's device
  std::vector<DeviceBuffer> ikeys;   // per layer [ctx, Di] f32 (full indexer layers): near-ties decide the top-k
  // The layer split: stage s runs on CUDA device stage_dev[s]; layer l on stage layer_stage[l]; the
  // embedding on stage 0, the head on the last. `cur` is the stage whose device is current in a pass.
  std::vector<int> stage_dev;
  std::vector<int> layer_stage;
  std::vector<std::pair<int64_t, int64_t>> stage_layers;  // [begin, end) per stage
  int cur = 0;
  std::vector<int> topk_at;  // in a pass: the stage whose device holds layer l's top-k list now
  std::vector<DeviceBuffer> deq_scratch;  // per stage (the prefill dequantization buffer)
  PassArenas arenas;                      // the temporaries of a pass, one arena per device (temp_buffer)
  std::vector<PinnedUpload> uploads;      // per stage: a pass's small inputs, one async copy (optimized/staging.h)
  Trace* tr = nullptr;
  const ForcedDecisions* forced = nullptr;  // this pass's forced decisions (may be null)
  std::map<int64_t, std::vector<int32_t>> own_topk;  // this pass's own top-k per full layer (host; traced passes)
  std::map<int64_t, std::vector<int32_t>> own_tie;   // its tie flags and gaps (when the trace wants them)
  std::map<int64_t, std::vector<double>> own_gap;

  // ---- Batched decode (PipelineOptions::max_seqs > 0). A sequence slot owns pages of the shared,
  // paged latent cache `pool` (one per layer, the same page table for every layer) and its own region
  // [ctx, Di] of the indexer keys `skeys`.
  struct Seq {
    bool open = false;
    int64_t len = 0;
    std::vector<int32_t> pages;  // page i holds positions i * page_rows .. (i + 1) * page_rows - 1
  };
  std::vector<Seq> seqs;
  std::vector<int32_t> free_pages;  // a stack: the next page handed out is back()
  int64_t page_rows = 0, max_pages = 0, pool_rows = 0;
  std::vector<DeviceBuffer> pool;   // per layer [pool_rows, kv_lora+rope] f16, on the layer's device
  std::vector<DeviceBuffer> skeys;  // per full layer [max_seqs, ctx, Di] f32
  // The rows of a pass over sequences (null in forward()): what layer() needs to place them.
  struct SeqRows {
    std::vector<int> slot;       // per row: its sequence
    std::vector<int32_t> pos;    // per row: its position in that sequence
    std::vector<std::pair<int64_t, int64_t>> groups;  // [begin, end): rows of one sequence, consecutive positions
    int64_t plan_queries = 0;    // sparse MLA's plan (1: each row as when it runs alone; 0: the pass's rows)
    // Per stage, on its device (one uploaded image: rows_image()): the rows' token ids and positions,
    // each row's latent cache row, key row and key region (int64 element offset), its group, the
    // groups' page tables (in `owned`, or a step graph's persistent buffer).
    std::vector<const int32_t*> ids_at, pos_at, lat_rows, key_rows, row_tab, tab;
    std::vector<const int64_t*> key_off;
    std::vector<DeviceBuffer> owned;
    // A step shaped for a CUDA graph (every launch argument the same at every step): the indexer over
    // max_ctx keys, routing on the device, logits written to a device buffer. Same bits as the other path.
    bool graph_shape = false;
    float* d_logits = nullptr;
  };
  // A decode step of B sequences as a CUDA graph (PipelineOptions::decode_graph): its inputs live in a
  // persistent buffer that each step overwrites (one async copy) before the replay.
  struct StepGraph {
    DeviceBuffer inputs, logits;
    CudaGraph graph;
    uint64_t captured_gen = ~0ull, warm_gen = ~0ull;  // workspace_generation() at capture / at the last direct run
    // Chained greedy steps (graph_chain): the step's picks on the device, downloaded into one of two pinned
    // buffers (step k's while step k + 1 runs).
    DeviceBuffer picks;
    PinnedDownload picks_host[2];
    // Captured, and holding the current workspaces: the next step replays it.
    bool replays() const { return graph.ready() && captured_gen == workspace_generation(); }
  };
  std::map<int64_t, StepGraph> step_graphs;  // by B
  int64_t graph_replays = 0;
  // Set by decode_step_greedy for one step: the pass's logits stay on the device and their rows' greedy
  // picks (argmax_rows) are written here instead (B ids downloaded instead of B x vocab floats).
  int32_t* greedy_out = nullptr;
  // The end of a pass: logits [T, vocab] on the device to the host, or their greedy picks to greedy_out.
  std::vector<float> logits_out(const float* d_lg, int64_t T) {
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
  const SeqRows* sr = nullptr;
  bool all_gemv = false;  // decode steps: every product by the fused GEMV, whatever the number of rows

  Impl(const GgufFile& file, const ModelConfig& cfg, PipelineOptions o)
      : f(file), c(cfg), opt(o), arenas((size_t)std::max<int64_t>(o.pass_arena_bytes, 0)) {}

  const DevTensor& W(const std::string& name) const {
    auto it = w.find(name);
    if (it == w.end()) throw InputError(f.path() + ": tensor " + name + " is missing");
    return it->second;
  }
  const DevTensor& L(int64_t l, const char* suffix) const { return W(wname::blk(l, suffix)); }

  // The pass's temporaries (fp32 [n], or raw bytes): from the pass's arena (optimized/arena.h) inside
  // forward() / a pass over sequences / a graph step, buffers of their own outside (op replay).
  static DeviceBuffer fbuf(int64_t n) { return temp_buffer((size_t)std::max<int64_t>(n, 1) * 4); }
  static DeviceBuffer tbuf(size_t bytes) { return temp_buffer(std::max<size_t>(bytes, 1)); }

  // y [T, ne1] = W x, x [T, ne0]; `expert` selects one matrix of a 3-D expert tensor.
  void linear(const DevTensor& t, const float* x, int64_t T, float* y, int64_t expert = -1, bool fp32 = false) {
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

  void check(int64_t layer, const char* name, const float* d, int64_t n) {
    if (!opt.overflow_check) return;
    const int64_t bad = count_nonfinite(d, n);
    if (bad)
      throw OverflowError("overflow: " + std::string(layer < 0 ? "model" : "layer " + std::to_string(layer)) + " op '" + name +
                          "' produced " + std::to_string(bad) + " inf/NaN values of " + std::to_string(n) +
                          " (the first op to overflow)");
  }
  bool wants(int64_t layer, const char* name) const { return tr && tr->wants((int)layer, name); }
  void rec(int64_t layer, const char* name, const float* d, const std::vector<int64_t>& shape) {
    if (!wants(layer, name)) return;
    int64_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<float> h(n);
    if (n) copy_to_host(h.data(), d, n * 4);
    auto dd = to_double(h);
    tr->record((int)layer, name, dd.data(), shape);
  }
  // check + record
  void done(int64_t layer, const char* name, const float* d, const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    check(layer, name, d, n);
    rec(layer, name, d, shape);
  }

  // The stage a tensor lives on: its layer's; token_embd on the first, output_norm and output on the last.
  int stage_of(const TensorSpec& s) const {
    if (s.layer >= 0) return layer_stage[(size_t)s.layer];
    return s.name == wname::kTokenEmbd ? 0 : (int)stage_dev.size() - 1;
  }

  // Splits the layers over opt.devices (core/memory_plan.h: the same arithmetic as `mlaconf plan`).
  void plan_split() {
    stage_dev = opt.devices.empty() ? std::vector<int>{current_device()} : opt.devices;
    for (int d : stage_dev) {
      if (d < 0 || d >= device_count())
        throw InputError("--devices: CUDA device " + std::to_string(d) + " does not exist (" +
                         std::to_string(device_count()) + " here)");
    }
    const int64_t nl = c.n_layer_run();
    if ((int64_t)stage_dev.size() > nl)
      throw InputError("--devices: " + std::to_string(stage_dev.size()) + " devices for " + std::to_string(nl) +
                       " layers (at most one device per layer)");
    MemoryPlanRequest r;
    r.n_devices = (int)stage_dev.size();
    r.context = ctx;
    r.pass_arena_per_device = (uint64_t)std::max<int64_t>(opt.pass_arena_bytes, 0);
    MemoryPlan p = plan_memory(f, c, r);
    layer_stage.assign((size_t)nl, 0);
    for (const DevicePlan& d : p.devices) {
      stage_layers.emplace_back(d.layer_begin, d.layer_end);
      for (int64_t l = d.layer_begin; l < d.layer_end; ++l) layer_stage[(size_t)l] = d.index;
    }
    enable_peer_access(stage_dev);
    for (int sdev : stage_dev) {
      DeviceScope on(sdev);
      deq_scratch.emplace_back();
      uploads.emplace_back();
    }
  }

  // Makes stage s current; moves the hidden state h [n floats] there from the current stage, and every
  // top-k list that one of s's layers reads (a shared-indexer layer reads its source layer's) and that
  // lives on an earlier stage. Same device or not, the same copies run (virtual devices test this path).
  // Buffers left behind go to `retired` (freed after the pass, when no copy can still read them).
  void enter_stage(int s, DeviceBuffer& h, int64_t n, std::vector<DeviceBuffer>& topk, std::vector<DeviceBuffer>& retired) {
    if (s == cur) return;
    set_device(stage_dev[(size_t)s]);
    DeviceBuffer moved = tbuf((size_t)n * 4);
    if (active_fault() != Fault::SplitNoHandoff)
      copy_peer(moved.get(), stage_dev[(size_t)s], h.get(), stage_dev[(size_t)cur], (size_t)n * 4);
    retired.push_back(std::move(h));
    h = std::move(moved);
    for (int64_t l = stage_layers[(size_t)s].first; l < stage_layers[(size_t)s].second; ++l) {
      const bool full = l < (int64_t)c.indexer_full.size() ? (bool)c.indexer_full[l] : true;
      const int64_t src = full ? l : c.indexer_source_layer(l);
      if (src < 0 || src >= l || !topk[(size_t)src].get() || topk_at[(size_t)src] == s) continue;
      DeviceBuffer t = tbuf(topk[(size_t)src].bytes());
      copy_peer(t.get(), stage_dev[(size_t)s], topk[(size_t)src].get(), stage_dev[(size_t)topk_at[(size_t)src]], t.bytes());
      retired.push_back(std::move(topk[(size_t)src]));
      topk[(size_t)src] = std::move(t);
      topk_at[(size_t)src] = s;
    }
    cur = s;
  }

  void upload_weights() {
    for (const TensorSpec& s : model_tensor_specs(c)) {
      DeviceScope on(stage_dev[(size_t)stage_of(s)]);
      const TensorInfo& ti = f.tensor(s.name);
      DevTensor t;
      t.type = ti.type;
      t.ne0 = ti.ne[0];
      t.ne1 = ti.ne[1];
      t.ne2 = ti.ne[2];
      t.row_bytes = row_bytes(ti.type, ti.ne[0]);
      if (!can_dequantize(ti.type))
        throw InputError(f.path() + ": tensor " + s.name + " has type " + type_name(ti.type) + ", which the CUDA pipeline cannot read");
      t.buf = DeviceBuffer(ti.nbytes);
      t.buf.upload(ti.data, ti.nbytes);
      if (ti.type == GgmlType::F32 && ti.n_dims == 1) {
        t.host_f32.resize(ti.ne[0]);
        std::memcpy(t.host_f32.data(), ti.data, ti.ne[0] * 4);
      }
      w.emplace(s.name, std::move(t));
    }
  }

  void layer(int64_t l, float* h, int64_t T, const int32_t* d_pos, std::vector<DeviceBuffer>& topk_by_layer);
  // residual (optional): residual += out in the combine launch (the layer's residual add).
  void moe(int64_t l, const float* y, int64_t T, float* out, float* residual = nullptr);
  void record_topk_extras(int64_t l, const float* d_scores, int64_t T, int64_t Lkv, int64_t K);
  void check_ids(std::span<const int32_t> ids) const;
  std::vector<float> run_pass(std::span<const int32_t> ids, const std::vector<int32_t>& pos);

  // ---- batched decode: slots, pages, and a pass over rows of sequences
  void require_batched() const {
    if (seqs.empty()) throw InputError("batched decode needs PipelineOptions::max_seqs > 0");
  }
  const Seq& open_seq(int s) const {
    require_batched();
    if (s < 0 || s >= (int)seqs.size() || !seqs[(size_t)s].open)
      throw InputError("sequence " + std::to_string(s) + " is not open");
    return seqs[(size_t)s];
  }
  Seq& open_seq(int s) { return const_cast<Seq&>(std::as_const(*this).open_seq(s)); }
  // Gives sequence s the pages for positions up to `len` - 1 (InputError when the pool is exhausted).
  void grow(Seq& q, int64_t len) {
    while ((int64_t)q.pages.size() * page_rows < len) {
      if (free_pages.empty())
        throw InputError("the paged latent cache is full (" + std::to_string(pool_rows / page_rows) + " pages of " +
                         std::to_string(page_rows) + " rows; PipelineOptions::pool_pages)");
      q.pages.push_back(free_pages.back());
      free_pages.pop_back();
    }
  }
  int64_t cache_row(const Seq& q, int64_t p) const { return (int64_t)q.pages[(size_t)(p / page_rows)] * page_rows + p % page_rows; }
  // Host tables of a pass's rows (place(): pages granted first).
  struct RowTables {
    std::vector<int32_t> lat, key, row_tab, tab;
    std::vector<int64_t> key_off;
  };
  RowTables place(std::span<const int32_t> ids, const SeqRows& r);
  // The rows' inputs of one stage as one image in `up`, and r's arrays of that stage pointed at `base`
  // + their offsets, where the caller uploads the image (up.bytes() bytes).
  void rows_image(PinnedUpload& up, std::span<const int32_t> ids, const RowTables& h, const SeqRows& r, std::vector<size_t>& off) const;
  static void point_rows(SeqRows& r, const char* base, const std::vector<size_t>& off);
  // The image of `up` in a temporary of this pass on the current device (one async copy).
  static DeviceBuffer upload_temp(PinnedUpload& up) {
    DeviceBuffer b = tbuf(up.bytes());
    up.upload(b.get());
    return b;
  }
  // Runs rows r (filled: slot, pos, groups, plan) over their sequences and advances them. all_gemv: decode.
  std::vector<float> seq_pass(std::span<const int32_t> ids, SeqRows& r, bool gemv_only);
  std::vector<float> graph_step(std::span<const int32_t> ids, SeqRows& r);
  // A decode step's rows: one per sequence, at its length (InputError for a bad list).
  SeqRows step_rows(std::span<const int> seqs, std::span<const int32_t> ids);
  // The step's inputs into the B-row graph's input buffer (made here at the first step of a B): the rows' pages
  // granted, one image, one async copy from pinned memory on the legacy stream; the image's offsets (rows_image).
  std::vector<size_t> upload_step_inputs(StepGraph& G, std::span<const int32_t> ids, const SeqRows& r);
  // Greedy steps as replays of the captured B-row graph, queued one ahead (decode_steps_greedy): appends to out.
  void graph_chain(std::span<const int> seqs, std::span<const int32_t> ids, int64_t n, std::vector<std::vector<int32_t>>& out);
  // Runs fn with `r` as the pass's rows (no trace, no forced decisions), then clears them, also on error.
  template <class F>
  std::vector<float> with_rows(const SeqRows& r, bool gemv_only, F&& fn) {
    tr = nullptr;
    forced = nullptr;
    sr = &r;
    all_gemv = gemv_only;
    struct Reset {
      Impl* m;
      ~Reset() { m->sr = nullptr, m->all_gemv = false; }
    } reset{this};
    return fn();
  }
  void advance(const SeqRows& r) {
    for (size_t t = 0; t < r.slot.size(); ++t) {
      Seq& q = seqs[(size_t)r.slot[t]];
      q.len = std::max<int64_t>(q.len, r.pos[t] + 1);
    }
  }

  // ---- The ops of one layer. Each is one piece of logic, used by layer() / moe() in a forward pass and by
  // replay() on a fixture's inputs: fp32 device buffers of T rows, d_pos [T] the rows' positions.
  void attn_norm(int64_t l, const float* h, int64_t T, float* x) {
    rmsnorm(h, L(l, wname::kAttnNorm).buf.as<float>(), T, c.n_embd, c.n_embd, (float)c.rms_eps, x);
  }
  // q_a_proj; the fault inject-overflow writes +inf into layer 1's output.
  void q_a(int64_t l, const float* x, int64_t T, float* qa) {
    linear(L(l, wname::kQA), x, T, qa);
    if (l == 1 && active_fault() == Fault::InjectOverflow) scale_inplace(qa, 1, INFINITY);
  }
  void q_a_norm(int64_t l, const float* qa, int64_t T, float* cq) {
    rmsnorm(qa, L(l, wname::kQANorm).buf.as<float>(), T, c.q_lora_rank, c.q_lora_rank, (float)c.rms_eps, cq);
  }
  void q_b(int64_t l, const float* cq, int64_t T, float* qb) { linear(L(l, wname::kQB), cq, T, qb); }
  // RoPE on the rope values of each head of q_b [T, H, nope+rope], in place.
  void q_rope(float* qb, int64_t T, const int32_t* d_pos) {
    rope(qb, T, c.n_head, c.qk_head(), c.qk_nope(), c.qk_rope(), d_pos, c.rope_freq_base, false);
  }
  void kv_a(int64_t l, const float* x, int64_t T, float* kva) { linear(L(l, wname::kKvA), x, T, kva); }
  // Latent cache rows [RMSNorm(kv_a[:kv_lora]) | RoPE(kv_a[kv_lora:])], fp32 [T, kv_lora+rope].
  void latent_rows(int64_t l, const float* kva, int64_t T, const int32_t* d_pos, float* lat) {
    const int64_t dl = c.kv_lora_rank, R = c.qk_rope(), dlat = dl + R;
    rmsnorm(kva, L(l, wname::kKvANorm).buf.as<float>(), T, dl, dlat, (float)c.rms_eps, lat);
    copy2d(lat + dl, dlat * 4, kva + dl, dlat * 4, R * 4, T);
    rope(lat, T, 1, dlat, dl, R, d_pos, c.rope_freq_base, false);
  }
  // Absorbed query [W_UK^T q_nope | q_pe] per head, from q_b whose rope values are already rotated.
  void absorb(int64_t l, const float* qb, int64_t T, float* qabs) {
    const int64_t H = c.n_head, dn = c.qk_nope(), R = c.qk_rope(), dq = c.qk_head(), dl = c.kv_lora_rank, dlat = dl + R;
    const DevTensor& kb = L(l, wname::kKB);
    gemv_per_head(kb.type, kb.buf.get(), dl, dn, H, qb, dq, qabs, dlat, T * H, opt.gemv);
    copy2d(qabs + dl, dlat * 4, qb + dn, dq * 4, R * 4, T * H);
  }
  // The indexer in fp32 (its top-k is decided by near-ties that fp16 rounding flips). Its query: the
  // projection of cq, then RoPE (two calls, so that a decode step may queue them on different streams).
  void indexer_q_proj(int64_t l, const float* cq, int64_t T, float* qi) { linear(L(l, wname::kIdxQB), cq, T, qi, -1, true); }
  void indexer_q_rope(float* qi, int64_t T, const int32_t* d_pos) {
    rope(qi, T, c.indexer_n_head, c.indexer_head_size, 0, c.qk_rope(), d_pos, c.rope_freq_base, c.indexer_neox());
  }
  void indexer_q(int64_t l, const float* cq, int64_t T, const int32_t* d_pos, float* qi) {
    indexer_q_proj(l, cq, T, qi);
    indexer_q_rope(qi, T, d_pos);
  }
  // The indexer's keys ki [T, Di]: projection, layernorm, RoPE. With opt.indexer_key_fused the last two are one
  // launch (layernorm_rope, the same bits), which also writes row t to dst row idx[t] where idx is given; else
  // the caller scatters. Returns whether it did.
  bool indexer_k(int64_t l, const float* x, int64_t T, const int32_t* d_pos, float* ki, const int32_t* idx = nullptr,
                 float* dst = nullptr) {
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
  void indexer_weights(int64_t l, const float* x, int64_t T, float* wts) { linear(L(l, wname::kIdxProj), x, T, wts, -1, true); }
  // scores [T, Lkv]; scales wts (the unscaled indexer_weights [T, Hi]) in place by (Hi Di)^-1/2 first.
  void indexer_score_rows(const float* qi, const float* keys, float* wts, const int32_t* d_pos, int64_t T, int64_t Lkv, float* scores) {
    const int64_t Hi = c.indexer_n_head, Di = c.indexer_head_size;
    scale_indexer_weights(wts, T);
    indexer_scores_f32(qi, keys, wts, d_pos, T, Hi, Di, Lkv, scores);
  }
  void scale_indexer_weights(float* wts, int64_t T) {
    const int64_t Hi = c.indexer_n_head, Di = c.indexer_head_size;
    scale_inplace(wts, T * Hi, (float)(1.0 / std::sqrt((double)Hi * (double)Di)));
  }
  // The indexer of a pass over sequences: each group's rows score their own sequence's keys (exactly the
  // call forward() makes for that sequence alone), top-k positions, then absolute rows of the pool.
  // indexer_select_f32_rows: indexer_topk_f32_rows's selection; its scores are not needed here.
  void indexer_select_seq(int64_t l, const float* qi, float* wts, const int32_t* d_pos, int64_t T, int32_t* top) {
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
  // Per row of host scores [T, Lkv]: 1 when the k-th and (k+1)-th finite scores are equal, and their gap.
  static void topk_extras(const std::vector<float>& s, int64_t T, int64_t Lkv, int64_t K, std::vector<int32_t>& tie,
                          std::vector<double>& gap);
  // Sparse MLA of T fp16 absorbed queries over Lkv fp16 cache rows, limited to idx [T, top_k] -> att [T, H, kv_lora].
  void attend(const uint16_t* qabs_h, const uint16_t* cache_h, int64_t Lkv, const int32_t* idx, const int32_t* d_pos, int64_t T,
              float* att, int64_t plan_queries = 0) {
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
  void v_up(int64_t l, const float* att, int64_t T, float* vout) {
    const DevTensor& vb = L(l, wname::kVB);
    apply_wuv(vb.type, vb.buf.get(), c.v_head(), c.kv_lora_rank, att, T, c.n_head, vout, opt.gemv);
  }
  void o_proj(int64_t l, const float* vout, int64_t T, float* ao) { linear(L(l, wname::kAttnOut), vout, T, ao); }
  // a = input_hidden + attn_out (the caller adds) -> post-attention RMSNorm.
  void ffn_norm(int64_t l, const float* a, int64_t T, float* y) {
    rmsnorm(a, L(l, wname::kFfnNorm).buf.as<float>(), T, c.n_embd, c.n_embd, (float)c.rms_eps, y);
  }
  // h += attn_out, then ffn_norm, in one launch (the same bits as add_inplace then ffn_norm).
  void add_ffn_norm(int64_t l, float* h, const float* ao, int64_t T, float* y) {
    add_rmsnorm(h, ao, L(l, wname::kFfnNorm).buf.as<float>(), T, c.n_embd, (float)c.rms_eps, y);
  }
  void dense_mlp(int64_t l, const float* y, int64_t T, float* m) {
    const int64_t F = c.n_ff;
    auto g = fbuf(T * F), u = fbuf(T * F);
    linear(L(l, wname::kFfnGate), y, T, g.as<float>());
    linear(L(l, wname::kFfnUp), y, T, u.as<float>());
    silu_gate(g.as<float>(), u.as<float>(), T * F, g.as<float>());
    linear(L(l, wname::kFfnDown), g.as<float>(), T, m);
  }
  void router_logits(int64_t l, const float* y, int64_t T, float* logits) { linear(L(l, wname::kGateInp), y, T, logits); }
  // The router's selection on the host, in fp32, from the logits [T, n_expert]: ids ascending, their
  // weights, the selection gap, and the gating probabilities (for the weights of forced ids).
  struct Route {
    std::vector<int32_t> ids;
    std::vector<float> wts, probs;
    std::vector<double> gap;
  };
  Route route(int64_t l, const std::vector<float>& lg, int64_t T) const;
  // The routed weights of r.ids (ascending): gating probabilities at the ids, normalized, scaled.
  void route_weights(int64_t l, Route& r, int64_t T) const;
  // Layer l's routing configuration (bias on the device or the host); logits, T and outputs unset.
  RouteArgs route_args(int64_t l, bool on_device) const;
  // Each used expert once over its tokens -> eo [T, k, E] in slot order (unweighted).
  void experts(int64_t l, const float* y, int64_t T, const std::vector<int32_t>& ids, float* eo);
  void expert_pairs(int64_t l, const float* y, int64_t T, const int32_t* d_ids, const int32_t* d_tok, float* eo,
                    bool with_shared = false);
  // Whether a decode step's n (token, expert) pairs run grouped by expert (expert_pairs): from 1 pick per 4 experts
  // on average (GLM-5, 256 experts, top 8: B >= 8). v14 took 1 pick per expert (B >= 32: grouping measured -1.4 % at
  // B = 16 then); with v15's grouped passes of 4 slots in one column group the stack at B = 16 / 8 measured +11.1 /
  // +3.2 % grouped (H200, docs/PERF_H200.md v16). v11-v13 took 2 picks per expert.
  // MLACONF_GROUP_EXPERTS=0 / 1 turns it off / on at every size, for measurements; the bits are the same either way.
  bool group_experts(int64_t n) const { return opt.group_experts.value_or(4 * n >= c.n_expert); }
  // Whether a one-token decode step runs layer l's shared expert as one more entry of the experts' launches
  // (expert_pairs with_shared): one shared expert whose three matrices have the experts' types and shapes, on
  // the GEMV that takes an id of -1 (gemv_experts_mma_ok). It saves three launches (and their x splits) per
  // MoE layer; the shared expert's products have the same bits either way (gemv_mma.cuh).
  bool shared_as_entry(int64_t l, int64_t T) const {
    if (T != 1 || c.n_expert_shared != 1) return false;
    const DevTensor &gw = L(l, wname::kGateExps), &uw = L(l, wname::kUpExps), &dw = L(l, wname::kDownExps);
    const DevTensor &gs = L(l, wname::kGateShexp), &us = L(l, wname::kUpShexp), &ds = L(l, wname::kDownShexp);
    auto same = [](const DevTensor& e, const DevTensor& s) {
      return e.type == s.type && e.ne0 == s.ne0 && e.ne1 == s.ne1 && e.row_bytes == s.row_bytes && mma_aligned(s);
    };
    return same(gw, gs) && same(uw, us) && same(dw, ds) && experts_on_mma(l);
  }
  // Whether the tensor-core GEMV takes layer l's expert matrices by id, with an id of -1 or grouped: their types
  // and shapes (gemv_experts_mma_ok) and 16-byte aligned matrices (else it would decline, and those calls have
  // no other kernel).
  bool experts_on_mma(int64_t l) const {
    for (const char* n : {wname::kGateExps, wname::kUpExps, wname::kDownExps}) {
      const DevTensor& t = L(l, n);
      if (!gemv_experts_mma_ok(t.type, t.ne1, t.ne0, opt.gemv) || !mma_aligned(t)) return false;
    }
    return true;
  }
  static bool mma_aligned(const DevTensor& t) {
    return reinterpret_cast<uintptr_t>(t.buf.get()) % 16 == 0 && (t.ne1 * t.row_bytes) % 16 == 0;
  }
  void shared_expert(int64_t l, const float* y, int64_t T, float* sh) {
    const int64_t Fs = L(l, wname::kGateShexp).ne1;
    auto g = fbuf(T * Fs), u = fbuf(T * Fs);
    linear(L(l, wname::kGateShexp), y, T, g.as<float>());
    linear(L(l, wname::kUpShexp), y, T, u.as<float>());
    silu_gate(g.as<float>(), u.as<float>(), T * Fs, g.as<float>());
    linear(L(l, wname::kDownShexp), g.as<float>(), T, sh);
  }
  // out [T, E] = sum_j wts[t, j] eo[t, j] (+ sh when not null).
  void combine(const float* eo, const std::vector<float>& wts, const float* sh, int64_t T, float* out, float* residual = nullptr) {
    PinnedUpload& up = uploads[(size_t)cur];
    up.clear();
    up.add(wts.data(), wts.size() * 4);
    auto d_w = upload_temp(up);
    weighted_combine(eo, d_w.as<float>(), T, c.n_expert_used, c.n_embd, sh, out, residual);
  }

  // Op replay (Pipeline::replay_op): one op of layer l on host inputs, with the ops above.
  std::map<std::string, OpTensor> replay(int l, const std::string& op, const std::map<std::string, OpTensor>& in, int64_t pos0);
};

void Pipeline::Impl::topk_extras(const std::vector<float>& s, int64_t T, int64_t Lkv, int64_t K, std::vector<int32_t>& tie,
                                 std::vector<double>& gap) {
  tie.assign(T, 0);
  gap.assign(T, std::numeric_limits<double>::quiet_NaN());
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> v;
    for (int64_t i = 0; i < Lkv; ++i)
      if (std::isfinite(s[t * Lkv + i])) v.push_back(s[t * Lkv + i]);
    if ((int64_t)v.size() <= K) continue;
    std::nth_element(v.begin(), v.begin() + K, v.end(), std::greater<float>());
    const float next = v[K];
    const float kth = *std::min_element(v.begin(), v.begin() + K);
    gap[t] = (double)kth - (double)next;
    tie[t] = kth == next;
  }
}

void Pipeline::Impl::record_topk_extras(int64_t l, const float* d_scores, int64_t T, int64_t Lkv, int64_t K) {
  const bool want_tie = wants(l, op::kIndexerTopkTie), want_gap = wants(l, op::kIndexerTopkGap);
  if (!tr) return;  // kept for the layers that share this selection even when this layer records neither
  std::vector<float> s(T * Lkv);
  copy_to_host(s.data(), d_scores, s.size() * 4);
  std::vector<int32_t> tie;
  std::vector<double> gap;
  topk_extras(s, T, Lkv, K, tie, gap);
  if (want_tie) tr->record_i32((int)l, op::kIndexerTopkTie, tie.data(), {T});
  if (want_gap) tr->record((int)l, op::kIndexerTopkGap, gap.data(), {T});
  own_tie[l] = std::move(tie);  // for the layers that share this selection
  own_gap[l] = std::move(gap);
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
  const bool full = l < (int64_t)c.indexer_full.size() ? (bool)c.indexer_full[l] : true;
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
      auto scores = fbuf(T * Lkv);
      scale_indexer_weights(wts.as<float>(), T);
      indexer_topk_f32_rows(qi.as<float>(), ikeys[l].as<float>(), nullptr, wts.as<float>(), d_pos, T, Hi, Di, Lkv, K, scores.as<float>(),
                            topk_by_layer[l].as<int32_t>());
      rec(l, op::kIndexerScores, scores.as<float>(), {T, Lkv});
      if (tr) {  // our own selection, kept for the layers that share it (recorded under their names too)
        std::vector<int32_t>& top = own_topk[l];
        top.resize(T * K);
        copy_to_host(top.data(), topk_by_layer[l].get(), top.size() * 4);
        if (wants(l, op::kIndexerTopk)) tr->record_i32((int)l, op::kIndexerTopk, top.data(), {T, K});
      }
      record_topk_extras(l, scores.as<float>(), T, Lkv, K);
      // Forced selections replace ours for attention (ours were recorded above).
      if (const int32_t* fk = forced ? forced->topk_of((int)l, T, K) : nullptr) {
        for (int64_t i = 0; i < T * K; ++i)
          if (fk[i] < -1 || fk[i] > n_past + i / K)
            throw InputError("forced indexer_topk of layer " + std::to_string(l) + ", row " + std::to_string(i / K) + ": " +
                             std::to_string(fk[i]) + " is not a causal key position");
        topk_by_layer[l].upload(fk, (size_t)T * K * 4);
      }
    }
  };
  if (side) {
    // At one token the side stream is the longer one: its key and weights (~25 us of small launches on the
    // H200) hold back the query's projection queued behind them, and the main stream waited ~20 us a layer at the
    // join (PERF_H200 v13). So there the projection runs here, beside them, and the side takes the query from RoPE
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

  // Latent: [RMSNorm(kv_a[:dl]) | RoPE(kv_a[dl:])] -> the fp16 cache rows n_past..n_past+T-1.
  auto kva = fbuf(T * dlat);
  kv_a(l, x.as<float>(), T, kva.as<float>());
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
  // A layer that shares its source's selection records it under its own name, as the reference does.
  if (!full && wants(l, op::kIndexerTopk) && own_topk.count(src))
    tr->record_i32((int)l, op::kIndexerTopk, own_topk[src].data(), {T, K});
  if (!full && wants(l, op::kIndexerTopkTie) && own_tie.count(src))
    tr->record_i32((int)l, op::kIndexerTopkTie, own_tie[src].data(), {T});
  if (!full && wants(l, op::kIndexerTopkGap) && own_gap.count(src))
    tr->record((int)l, op::kIndexerTopkGap, own_gap[src].data(), {T});

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

  // FFN (the residual add of the attention output fused into its norm).
  auto y = fbuf(T * E);
  add_ffn_norm(l, h, ao.as<float>(), T, y.as<float>());
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
  // Forced expert ids replace ours, with their own weights (the gap recorded below stays ours).
  if (const int32_t* fe = forced ? forced->experts_of((int)l, T, k) : nullptr) {
    for (int64_t i = 0; i < T * k; ++i) {
      if (fe[i] < 0 || fe[i] >= nE)
        throw InputError("forced router_ids of layer " + std::to_string(l) + ": " + std::to_string(fe[i]) + " is not an expert id");
      r.ids[i] = fe[i];
    }
    route_weights(l, r, T);
  }
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
    const bool full = l < (int64_t)c.indexer_full.size() ? (bool)c.indexer_full[l] : true;
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
      const bool full = l < (int64_t)c.indexer_full.size() ? (bool)c.indexer_full[l] : true;
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

std::map<std::string, OpTensor> Pipeline::replay_op(int layer, const std::string& op, const std::map<std::string, OpTensor>& in,
                                                   int64_t pos0) {
  return impl_->replay(layer, op, in, pos0);
}

// Op replay: the op's inputs (exact, from a fixture) go to the device as fp32 (the latent cache and the
// absorbed query as fp16, as the pipeline stores them), then the very member function the forward pass
// runs for that op; nothing is recorded and nothing is checked for overflow, so that a fault's inf shows
// in the answer as the first failing op.
std::map<std::string, OpTensor> Pipeline::Impl::replay(int l, const std::string& op, const std::map<std::string, OpTensor>& in,
                                                       int64_t pos0) {
  const int64_t E = c.n_embd, H = c.n_head, dn = c.qk_nope(), R = c.qk_rope(), dq = c.qk_head(), dl = c.kv_lora_rank;
  const int64_t dlat = dl + R, Q = c.q_lora_rank, Hi = c.indexer_n_head, Di = c.indexer_head_size, K = c.indexer_top_k;
  const int64_t V = c.v_head(), U = c.n_expert_used, X = c.n_expert;
  if (l < 0 || l >= c.n_layer_run()) throw InputError("op replay: layer " + std::to_string(l) + " is outside the model");
  if (pos0 < 0 || pos0 > INT32_MAX) throw InputError("op replay: pos0 " + std::to_string(pos0) + " is out of range");
  tr = nullptr;
  forced = nullptr;
  // The layer's stage (layer split): its weights, and the dequant buffer linear() picks, live on its device.
  DeviceScope keep(current_device());
  cur = layer_stage[(size_t)l];
  set_device(stage_dev[(size_t)cur]);
  // An input [rows, width values] (width 0: any), checked.
  auto input = [&](const char* name, int64_t width) -> const OpTensor& {
    auto it = in.find(name);
    if (it == in.end()) throw InputError("op replay of " + op + ": input " + name + " is missing");
    const OpTensor& t = it->second;
    int64_t w = 1;
    for (size_t i = 1; i < t.shape.size(); ++i) w *= t.shape[i];
    if (t.shape.empty() || (width > 0 && w != width) || (int64_t)t.v.size() != t.shape[0] * w)
      throw InputError("op replay of " + op + ": input " + name + " does not have " + std::to_string(width) + " values per row");
    return t;
  };
  auto rows = [&](const char* name) { return input(name, 0).shape[0]; };
  auto up = [&](const char* name, int64_t width) {
    const OpTensor& t = input(name, width);
    return to_device(std::vector<float>(t.v.begin(), t.v.end()));
  };
  auto up_i32 = [&](const char* name, int64_t width, int32_t lo, int64_t hi) {
    const OpTensor& t = input(name, width);
    std::vector<int32_t> v(t.v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (t.v[i] < lo || t.v[i] > (double)hi)
        throw InputError("op replay of " + op + ": " + name + " entry " + std::to_string((long long)t.v[i]) + " is outside [" +
                         std::to_string(lo) + ", " + std::to_string(hi) + "]");
      v[i] = (int32_t)t.v[i];
    }
    return v;
  };
  auto same_rows = [&](const char* a, const char* b) {
    if (rows(a) != rows(b)) throw InputError("op replay of " + op + ": " + a + " and " + b + " rows differ");
  };
  auto down = [&](const void* d, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<float> h(n);
    if (n) copy_to_host(h.data(), d, n * 4);
    return OpTensor{std::move(shape), to_double(h)};
  };
  auto positions = [&](int64_t T) {
    std::vector<int32_t> p(T);
    for (int64_t t = 0; t < T; ++t) p[t] = (int32_t)(pos0 + t);
    return to_device(p);
  };
  std::map<std::string, OpTensor> out;

  if (op == op::kAttnNormOut) {
    auto h = up(op::kInputHidden, E);
    const int64_t T = rows(op::kInputHidden);
    auto x = fbuf(T * E);
    attn_norm(l, h.as<float>(), T, x.as<float>());
    out[op] = down(x.get(), {T, E});
  } else if (op == op::kQA) {
    auto x = up(op::kAttnNormOut, E);
    const int64_t T = rows(op::kAttnNormOut);
    auto qa = fbuf(T * Q);
    q_a(l, x.as<float>(), T, qa.as<float>());
    out[op] = down(qa.get(), {T, Q});
  } else if (op == op::kQANorm) {
    auto qa = up(op::kQA, Q);
    const int64_t T = rows(op::kQA);
    auto cq = fbuf(T * Q);
    q_a_norm(l, qa.as<float>(), T, cq.as<float>());
    out[op] = down(cq.get(), {T, Q});
  } else if (op == op::kQB) {
    auto cq = up(op::kQANorm, Q);
    const int64_t T = rows(op::kQANorm);
    auto qb = fbuf(T * H * dq);
    q_b(l, cq.as<float>(), T, qb.as<float>());
    out[op] = down(qb.get(), {T, H, dq});
  } else if (op == op::kQPeRope) {
    auto qb = up(op::kQB, H * dq);
    const int64_t T = rows(op::kQB);
    auto d_pos = positions(T);
    q_rope(qb.as<float>(), T, d_pos.as<int32_t>());
    auto qpe = fbuf(T * H * R);
    copy2d(qpe.get(), R * 4, qb.as<float>() + dn, dq * 4, R * 4, T * H);
    out[op] = down(qpe.get(), {T, H, R});
  } else if (op == op::kKvA) {
    auto x = up(op::kAttnNormOut, E);
    const int64_t T = rows(op::kAttnNormOut);
    auto kva = fbuf(T * dlat);
    kv_a(l, x.as<float>(), T, kva.as<float>());
    out[op] = down(kva.get(), {T, dlat});
  } else if (op == op::kKvLatent || op == op::kKPeRope) {
    auto kva = up(op::kKvA, dlat);
    const int64_t T = rows(op::kKvA);
    auto d_pos = positions(T);
    auto lat = fbuf(T * dlat);
    latent_rows(l, kva.as<float>(), T, d_pos.as<int32_t>(), lat.as<float>());
    const bool latent_part = op == op::kKvLatent;
    const int64_t w = latent_part ? dl : R;
    auto part = fbuf(T * w);
    copy2d(part.get(), w * 4, lat.as<float>() + (latent_part ? 0 : dl), dlat * 4, w * 4, T);
    out[op] = down(part.get(), {T, w});
  } else if (op == op::kQAbsorbed) {
    // q_b with its rope values replaced by the given q_pe_rope: what absorb() reads in a forward pass.
    auto qb = up(op::kQB, H * dq);
    auto qpe = up(op::kQPeRope, H * R);
    same_rows(op::kQB, op::kQPeRope);
    const int64_t T = rows(op::kQB);
    copy2d(qb.as<float>() + dn, dq * 4, qpe.get(), R * 4, R * 4, T * H);
    auto qabs = fbuf(T * H * dlat);
    absorb(l, qb.as<float>(), T, qabs.as<float>());
    out[op] = down(qabs.get(), {T, H, dlat});
  } else if (op == op::kIndexerQ) {
    auto cq = up(op::kQANorm, Q);
    const int64_t T = rows(op::kQANorm);
    auto d_pos = positions(T);
    auto qi = fbuf(T * Hi * Di);
    indexer_q(l, cq.as<float>(), T, d_pos.as<int32_t>(), qi.as<float>());
    out[op] = down(qi.get(), {T, Hi, Di});
  } else if (op == op::kIndexerK) {
    // The T new keys at positions pos0.. after the S - T earlier rows of the key cache given.
    auto x = up(op::kAttnNormOut, E);
    auto keys = up(op::kIndexerK, Di);
    const int64_t T = rows(op::kAttnNormOut), S = rows(op::kIndexerK);
    if (S != pos0 + T)
      throw InputError("op replay of indexer_k: the cache given holds " + std::to_string(S) + " rows, not pos0 + T = " +
                       std::to_string(pos0 + T));
    auto d_pos = positions(T);
    indexer_k(l, x.as<float>(), T, d_pos.as<int32_t>(), keys.as<float>() + pos0 * Di);
    out[op] = down(keys.get(), {S, Di});
  } else if (op == op::kIndexerWeights) {
    auto x = up(op::kAttnNormOut, E);
    const int64_t T = rows(op::kAttnNormOut);
    auto wts = fbuf(T * Hi);
    indexer_weights(l, x.as<float>(), T, wts.as<float>());
    out[op] = down(wts.get(), {T, Hi});
  } else if (op == op::kIndexerScores) {
    auto qi = up(op::kIndexerQ, Hi * Di);
    auto keys = up(op::kIndexerK, Di);
    auto wts = up(op::kIndexerWeights, Hi);
    same_rows(op::kIndexerQ, op::kIndexerWeights);
    const int64_t T = rows(op::kIndexerQ), S = rows(op::kIndexerK);
    auto d_pos = positions(T);
    auto scores = fbuf(T * S);
    indexer_score_rows(qi.as<float>(), keys.as<float>(), wts.as<float>(), d_pos.as<int32_t>(), T, S, scores.as<float>());
    out[op] = down(scores.get(), {T, S});
  } else if (op == op::kIndexerTopk) {
    const OpTensor& st = input(op::kIndexerScores, 0);
    const int64_t T = st.shape[0], S = st.shape.size() == 2 ? st.shape[1] : 0;
    std::vector<float> s(st.v.begin(), st.v.end());
    auto d_s = to_device(s);
    DeviceBuffer top((size_t)std::max<int64_t>(T * K, 1) * 4);
    topk_rows(d_s.as<float>(), T, S, K, top.as<int32_t>());
    std::vector<int32_t> idx(T * K), tie;
    std::vector<double> gap;
    if (T * K > 0) copy_to_host(idx.data(), top.get(), idx.size() * 4);
    topk_extras(s, T, S, K, tie, gap);
    out[op::kIndexerTopk] = OpTensor{{T, K}, std::vector<double>(idx.begin(), idx.end())};
    out[op::kIndexerTopkTie] = OpTensor{{T}, std::vector<double>(tie.begin(), tie.end())};
    out[op::kIndexerTopkGap] = OpTensor{{T}, gap};
  } else if (op == op::kAttnLatentOut) {
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
    attend(qabs_h.as<uint16_t>(), cache_h.as<uint16_t>(), S, idx.as<int32_t>(), d_pos.as<int32_t>(), T, att.as<float>());
    out[op] = down(att.get(), {T, H, dl});
  } else if (op == op::kAttnVOut) {
    auto att = up(op::kAttnLatentOut, H * dl);
    const int64_t T = rows(op::kAttnLatentOut);
    auto vout = fbuf(T * H * V);
    v_up(l, att.as<float>(), T, vout.as<float>());
    out[op] = down(vout.get(), {T, H, V});
  } else if (op == op::kAttnOut) {
    auto vout = up(op::kAttnVOut, H * V);
    const int64_t T = rows(op::kAttnVOut);
    auto ao = fbuf(T * E);
    o_proj(l, vout.as<float>(), T, ao.as<float>());
    out[op] = down(ao.get(), {T, E});
  } else if (op == op::kFfnNormOut) {
    auto h = up(op::kInputHidden, E);
    auto ao = up(op::kAttnOut, E);
    same_rows(op::kInputHidden, op::kAttnOut);
    const int64_t T = rows(op::kInputHidden);
    add_inplace(h.as<float>(), ao.as<float>(), T * E);
    auto y = fbuf(T * E);
    ffn_norm(l, h.as<float>(), T, y.as<float>());
    out[op] = down(y.get(), {T, E});
  } else if (op == op::kRouterLogits) {
    auto y = up(op::kFfnNormOut, E);
    const int64_t T = rows(op::kFfnNormOut);
    auto lg = fbuf(T * X);
    router_logits(l, y.as<float>(), T, lg.as<float>());
    out[op] = down(lg.get(), {T, X});
  } else if (op == op::kRouterIds) {
    const OpTensor& t = input(op::kRouterLogits, X);
    const int64_t T = t.shape[0];
    Route r = route(l, std::vector<float>(t.v.begin(), t.v.end()), T);
    out[op::kRouterIds] = OpTensor{{T, U}, std::vector<double>(r.ids.begin(), r.ids.end())};
    out[op::kRouterWeights] = OpTensor{{T, U}, to_double(r.wts)};
    out[op::kRouterTopkGap] = OpTensor{{T}, r.gap};
  } else if (op == op::kExpertOut) {
    auto y = up(op::kFfnNormOut, E);
    same_rows(op::kFfnNormOut, op::kRouterIds);
    const int64_t T = rows(op::kFfnNormOut);
    const std::vector<int32_t> ids = up_i32(op::kRouterIds, U, 0, X - 1);
    auto eo = fbuf(T * U * E);
    experts(l, y.as<float>(), T, ids, eo.as<float>());
    out[op] = down(eo.get(), {T, U, E});
  } else if (op == op::kSharedExpertOut) {
    auto y = up(op::kFfnNormOut, E);
    const int64_t T = rows(op::kFfnNormOut);
    auto sh = fbuf(T * E);
    shared_expert(l, y.as<float>(), T, sh.as<float>());
    out[op] = down(sh.get(), {T, E});
  } else if (op == op::kMlpOut && !c.is_moe_layer(l)) {
    auto y = up(op::kFfnNormOut, E);
    const int64_t T = rows(op::kFfnNormOut);
    auto m = fbuf(T * E);
    dense_mlp(l, y.as<float>(), T, m.as<float>());
    out[op] = down(m.get(), {T, E});
  } else if (op == op::kMlpOut) {
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
    combine(eo.as<float>(), std::vector<float>(w.v.begin(), w.v.end()), sh.get() ? sh.as<float>() : nullptr, T, m.as<float>());
    out[op] = down(m.get(), {T, E});
  } else if (op == op::kOutputHidden) {
    auto h = up(op::kInputHidden, E);
    auto ao = up(op::kAttnOut, E);
    auto m = up(op::kMlpOut, E);
    same_rows(op::kInputHidden, op::kAttnOut);
    same_rows(op::kInputHidden, op::kMlpOut);
    const int64_t T = rows(op::kInputHidden);
    add_inplace(h.as<float>(), ao.as<float>(), T * E);
    add_inplace(h.as<float>(), m.as<float>(), T * E);
    out[op] = down(h.get(), {T, E});
  } else {
    throw InputError("op replay: unknown op '" + op + "'");
  }
  return out;
}

}  // namespace mlaconf::cuda
