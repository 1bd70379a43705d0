// mlaconf optimized: Pipeline::Impl, the state and the ops of the CUDA pipeline (private to optimized/: callers
// use pipeline.h). Its members are defined by job:
//   pipeline.cpp            the constructor (and the environment overrides), forward(), run_pass(), generate()
//   pipeline_split.cpp      the layer split over devices: the stages, the weights per stage, the hand-offs
//   pipeline_layer.cpp      one layer: the query path, the indexer (on a side stream in decode steps), attention, FFN
//   pipeline_moe.cpp        the MoE block: routing (host or device), the experts, the combine
//   pipeline_ops.cpp        the ops of one layer, which layer(), moe() and op replay share; linear(); check/record
//   pipeline_decisions.cpp  the decisions: ours recorded, forced ones checked and used
//   pipeline_batch.cpp      batched decode: sequence slots, passes over their rows, decode steps as CUDA graphs
//   pipeline_replay.cpp     op replay: one op on a fixture's exact inputs
#pragma once
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

struct DevTensor {
  GgmlType type = GgmlType::F32;
  int64_t ne0 = 0, ne1 = 1, ne2 = 1;
  int64_t row_bytes = 0;
  DeviceBuffer buf;
  std::vector<float> host_f32;  // F32 vectors the host needs (router bias)
};

inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

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
  std::vector<float> logits_out(const float* d_lg, int64_t T);
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

  // ---- Products, checks and records (pipeline_ops.cpp).
  // y [T, ne1] = W x, x [T, ne0]; `expert` selects one matrix of a 3-D expert tensor.
  void linear(const DevTensor& t, const float* x, int64_t T, float* y, int64_t expert = -1, bool fp32 = false);

  void check(int64_t layer, const char* name, const float* d, int64_t n);
  bool wants(int64_t layer, const char* name) const { return tr && tr->wants((int)layer, name); }
  void rec(int64_t layer, const char* name, const float* d, const std::vector<int64_t>& shape);
  // check + record
  void done(int64_t layer, const char* name, const float* d, const std::vector<int64_t>& shape);

  // ---- The layer split over devices (pipeline_split.cpp).
  // The stage a tensor lives on: its layer's; token_embd on the first, output_norm and output on the last.
  int stage_of(const TensorSpec& s) const;

  // Splits the layers over opt.devices (core/memory_plan.h: the same arithmetic as `mlaconf plan`).
  void plan_split();

  // Makes stage s current; moves the hidden state h [n floats] there from the current stage, and every
  // top-k list that one of s's layers reads (a shared-indexer layer reads its source layer's) and that
  // lives on an earlier stage. Same device or not, the same copies run (virtual devices test this path).
  // Buffers left behind go to `retired` (freed after the pass, when no copy can still read them).
  void enter_stage(int s, DeviceBuffer& h, int64_t n, std::vector<DeviceBuffer>& topk, std::vector<DeviceBuffer>& retired);

  // Every weight the model runs, uploaded to its stage's device.
  void upload_weights();

  // ---- A forward pass: run_pass (pipeline.cpp), layer() and its parts (pipeline_layer.cpp), moe() (pipeline_moe.cpp).
  void check_ids(std::span<const int32_t> ids) const;
  std::vector<float> run_pass(std::span<const int32_t> ids, const std::vector<int32_t>& pos);
  // One layer on the hidden state h [T, E] of rows at positions d_pos; a full layer's top-k list to topk_by_layer[l].
  void layer(int64_t l, float* h, int64_t T, const int32_t* d_pos, std::vector<DeviceBuffer>& topk_by_layer);
  // Its parts: the rows' latent to the cache; the FFN (h += attn_out, the MLP or MoE, h += its output).
  void latent_to_cache(int64_t l, const float* x, int64_t T, const int32_t* d_pos);
  void ffn(int64_t l, float* h, const float* ao, int64_t T);
  // residual (optional): residual += out in the combine launch (the layer's residual add).
  void moe(int64_t l, const float* y, int64_t T, float* out, float* residual = nullptr);
  // forward()'s indexer selection (not over sequences): scores, top-k, records, forced selections.
  void indexer_select(int64_t l, const float* qi, float* wts, const int32_t* d_pos, int64_t T, DeviceBuffer& top);

  // ---- Decisions (pipeline_decisions.cpp): ours recorded, forced ones checked and used.
  void record_topk_extras(int64_t l, const float* d_scores, int64_t T, int64_t Lkv, int64_t K);
  void record_own_topk(int64_t l, const int32_t* d_top, int64_t T, int64_t K);
  void record_shared_selection(int64_t l, int64_t src, int64_t T, int64_t K);
  void force_topk(int64_t l, int64_t T, int64_t K, DeviceBuffer& top);

  // ---- Batched decode: slots, pages, and a pass over rows of sequences (pipeline_batch.cpp).
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
  void grow(Seq& q, int64_t len);
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
  void advance(const SeqRows& r);

  // ---- The ops of one layer (pipeline_ops.cpp; the MoE's in pipeline_moe.cpp). Each is one piece of logic, used
  // by layer() / moe() in a forward pass and by replay() on a fixture's inputs: fp32 device buffers of T rows,
  // d_pos [T] the rows' positions.
  void attn_norm(int64_t l, const float* h, int64_t T, float* x);
  // q_a_proj; the fault inject-overflow writes +inf into layer 1's output.
  void q_a(int64_t l, const float* x, int64_t T, float* qa);
  void q_a_norm(int64_t l, const float* qa, int64_t T, float* cq);
  void q_b(int64_t l, const float* cq, int64_t T, float* qb);
  // RoPE on the rope values of each head of q_b [T, H, nope+rope], in place.
  void q_rope(float* qb, int64_t T, const int32_t* d_pos);
  void kv_a(int64_t l, const float* x, int64_t T, float* kva);
  // Latent cache rows [RMSNorm(kv_a[:kv_lora]) | RoPE(kv_a[kv_lora:])], fp32 [T, kv_lora+rope].
  void latent_rows(int64_t l, const float* kva, int64_t T, const int32_t* d_pos, float* lat);
  // Absorbed query [W_UK^T q_nope | q_pe] per head, from q_b whose rope values are already rotated.
  void absorb(int64_t l, const float* qb, int64_t T, float* qabs);
  // The indexer in fp32 (its top-k is decided by near-ties that fp16 rounding flips). Its query: the
  // projection of cq, then RoPE (two calls, so that a decode step may queue them on different streams).
  void indexer_q_proj(int64_t l, const float* cq, int64_t T, float* qi);
  void indexer_q_rope(float* qi, int64_t T, const int32_t* d_pos);
  void indexer_q(int64_t l, const float* cq, int64_t T, const int32_t* d_pos, float* qi);
  // The indexer's keys ki [T, Di]: projection, layernorm, RoPE. With opt.indexer_key_fused the last two are one
  // launch (layernorm_rope, the same bits), which also writes row t to dst row idx[t] where idx is given; else
  // the caller scatters. Returns whether it did.
  bool indexer_k(int64_t l, const float* x, int64_t T, const int32_t* d_pos, float* ki, const int32_t* idx = nullptr,
                 float* dst = nullptr);
  void indexer_weights(int64_t l, const float* x, int64_t T, float* wts);
  // scores [T, Lkv]; scales wts (the unscaled indexer_weights [T, Hi]) in place by (Hi Di)^-1/2 first.
  void indexer_score_rows(const float* qi, const float* keys, float* wts, const int32_t* d_pos, int64_t T, int64_t Lkv, float* scores);
  void scale_indexer_weights(float* wts, int64_t T);
  // The indexer of a pass over sequences: each group's rows score their own sequence's keys (exactly the
  // call forward() makes for that sequence alone), top-k positions, then absolute rows of the pool.
  // indexer_select_f32_rows: indexer_topk_f32_rows's selection; its scores are not needed here.
  void indexer_select_seq(int64_t l, const float* qi, float* wts, const int32_t* d_pos, int64_t T, int32_t* top);
  // Per row of host scores [T, Lkv]: 1 when the k-th and (k+1)-th finite scores are equal, and their gap.
  static void topk_extras(const std::vector<float>& s, int64_t T, int64_t Lkv, int64_t K, std::vector<int32_t>& tie,
                          std::vector<double>& gap);
  // Sparse MLA of T fp16 absorbed queries over Lkv fp16 cache rows, limited to idx [T, top_k] -> att [T, H, kv_lora].
  void attend(const uint16_t* qabs_h, const uint16_t* cache_h, int64_t Lkv, const int32_t* idx, const int32_t* d_pos, int64_t T,
              float* att, int64_t plan_queries = 0);
  void v_up(int64_t l, const float* att, int64_t T, float* vout);
  void o_proj(int64_t l, const float* vout, int64_t T, float* ao);
  // a = input_hidden + attn_out (the caller adds) -> post-attention RMSNorm.
  void ffn_norm(int64_t l, const float* a, int64_t T, float* y);
  // h += attn_out, then ffn_norm, in one launch (the same bits as add_inplace then ffn_norm).
  void add_ffn_norm(int64_t l, float* h, const float* ao, int64_t T, float* y);
  void dense_mlp(int64_t l, const float* y, int64_t T, float* m);
  void router_logits(int64_t l, const float* y, int64_t T, float* logits);
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
  // Forced expert ids (if any for layer l) in place of r's, with their weights.
  void force_experts(int64_t l, int64_t T, Route& r) const;
  // Layer l's routing configuration (bias on the device or the host); logits, T and outputs unset.
  RouteArgs route_args(int64_t l, bool on_device) const;
  // Each used expert once over its tokens -> eo [T, k, E] in slot order (unweighted).
  void experts(int64_t l, const float* y, int64_t T, const std::vector<int32_t>& ids, float* eo);
  void expert_pairs(int64_t l, const float* y, int64_t T, const int32_t* d_ids, const int32_t* d_tok, float* eo,
                    bool with_shared = false);
  // Whether a decode step's n (token, expert) pairs run grouped by expert (expert_pairs): from 1 pick per 4 experts
  // on average (GLM-5, 256 experts, top 8: B >= 8). v14 took 1 pick per expert (B >= 32: grouping measured -1.4 % at
  // B = 16 then); with v15's grouped passes of 4 slots in one column group the stack at B = 16 / 8 measured +11.1 /
  // +3.2 % grouped (H200, docs/perf/h200-2026-12-02.md v16). v11-v13 took 2 picks per expert.
  // MLACONF_GROUP_EXPERTS=0 / 1 turns it off / on at every size, for measurements; the bits are the same either way.
  bool group_experts(int64_t n) const { return opt.group_experts.value_or(4 * n >= c.n_expert); }
  // Whether a one-token decode step runs layer l's shared expert as one more entry of the experts' launches
  // (expert_pairs with_shared): one shared expert whose three matrices have the experts' types and shapes, on
  // the GEMV that takes an id of -1 (gemv_experts_mma_ok). It saves three launches (and their x splits) per
  // MoE layer; the shared expert's products have the same bits either way (gemv_mma.cuh).
  bool shared_as_entry(int64_t l, int64_t T) const;
  // Whether the tensor-core GEMV takes layer l's expert matrices by id, with an id of -1 or grouped: their types
  // and shapes (gemv_experts_mma_ok) and 16-byte aligned matrices (else it would decline, and those calls have
  // no other kernel).
  bool experts_on_mma(int64_t l) const;
  static bool mma_aligned(const DevTensor& t) {
    return reinterpret_cast<uintptr_t>(t.buf.get()) % 16 == 0 && (t.ne1 * t.row_bytes) % 16 == 0;
  }
  void shared_expert(int64_t l, const float* y, int64_t T, float* sh);
  // out [T, E] = sum_j wts[t, j] eo[t, j] (+ sh when not null).
  void combine(const float* eo, const std::vector<float>& wts, const float* sh, int64_t T, float* out, float* residual = nullptr);

  // ---- Op replay (Pipeline::replay_op, pipeline_replay.cpp): one op of layer l on host inputs, with the ops above.
  struct Replay;
  std::map<std::string, OpTensor> replay(int l, const std::string& op, const std::map<std::string, OpTensor>& in, int64_t pos0);
};

}  // namespace mlaconf::cuda
