// suites/gpu: batched decode of the CUDA pipeline (issue 10, item 2): B independent sequences in one
// pass, each in its own pages of a shared, paged latent cache, with its own indexer keys.
//
// The property checked: each row's arithmetic does not depend on the batch, so every sequence's logits
// in a batch are BIT-identical (memcmp) to decoding that sequence alone with forward() on a pipeline
// of its own (prefill logits too). What makes that hold, and what each check catches when it breaks:
//   - decode_step plans sparse MLA as for one query (PipelineOptions::batch_invariant), and the Q4_K
//     GEMV picks its rows per CTA from the matrix alone: a plan by B changes the split-K order;
//   - index lists are the sequence's top-k positions turned into absolute rows of the pool through its
//     page table: a wrong page, a wrong offset, or a row of another sequence changes the logits;
//   - the indexer scores each row against its own sequence's keys (exactly forward()'s call).
// Sequences have different lengths, several beyond the indexer's top_k (the sparse selection matters);
// pages are small (16 rows), so pages of different sequences interleave in the pool, and a sequence
// closed before the decode steps hands its (stale) pages to the others. The same with the decode steps
// captured in a CUDA graph (routing on the device, bit-exact with the host's), and as direct steps without the
// overflow check (each full layer's indexer on the side stream, as in graphs and `mlaconf bench`). Models: the tiny model
// (../shared/models), a synthesized glm-dsa model with odd sizes (5 heads, 2 indexer heads, top_k
// 16, shared-indexer layers FSFS), and one whose experts and shared expert are all Q4_K (under the tensor-core
// GEMV a one-token step runs the shared expert as one more entry of the experts' launches, and B = 8 groups
// its 32 pairs by expert). Also: the layer split (--devices 0,0) batched equals unsplit
// batched, and misuse is an InputError. Negative control: another sequence's logits differ (the
// comparison can fail).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <random>

#include "core/argmax.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/model_config.h"
#include "optimized/pipeline.h"
#include "suites/gpu/gpu_test_util.h"

namespace mlaconf::gputest {
namespace {

std::string tiny_model() {
  const char* env = std::getenv("MLACONF_SHARED_DIR");
  return std::string(env ? env : MLACONF_SHARED_DIR) + "/models/glm-dsa-tiny.gguf";
}
std::string cli() {
  const char* env = std::getenv("MLACONF_CLI");
  return env ? env : MLACONF_CLI;
}
int sh(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
}

constexpr int64_t kSteps = 6;
constexpr int64_t kPageRows = 16;

// Sequence b of a test: its prompt (length varies: short, around top_k, beyond it) and the tokens fed
// at its decode steps (teacher-forced: the same inputs batched and alone).
struct SeqInput {
  std::vector<int32_t> prompt, steps;
};
SeqInput seq_input(int64_t b, int64_t vocab, int64_t top_k) {
  const int64_t lens[] = {5, top_k + 6, 2 * top_k + 2, 9, top_k, top_k + 1, 3 * top_k + 8, 33};
  std::mt19937_64 rng(1000 + (uint64_t)b);
  SeqInput s;
  s.prompt.resize((size_t)(lens[b % 8] + b / 8));
  for (auto& t : s.prompt) t = (int32_t)(rng() % (uint64_t)vocab);
  s.steps.resize(kSteps);
  for (auto& t : s.steps) t = (int32_t)(rng() % (uint64_t)vocab);
  return s;
}
int64_t max_len(int64_t B, int64_t vocab, int64_t top_k) {
  int64_t m = 0;
  for (int64_t b = 0; b < B; ++b) m = std::max<int64_t>(m, (int64_t)seq_input(b, vocab, top_k).prompt.size());
  return m + kSteps + 1;
}

// Logits of one sequence: its prompt's (all rows), then one row per decode step.
struct SeqLogits {
  std::vector<float> prompt;
  std::vector<std::vector<float>> steps;
};

// Alone: a pipeline of its own, forward() of the prompt, then forward() of one token per step.
SeqLogits alone(const GgufFile& f, const ModelConfig& c, const SeqInput& in, int64_t ctx, const cuda::KernelConfig& k) {
  cuda::PipelineOptions o;
  static_cast<cuda::KernelConfig&>(o) = k;
  o.max_ctx = ctx;
  cuda::Pipeline p(f, c, o);
  SeqLogits r;
  r.prompt = p.forward(in.prompt);
  for (int32_t t : in.steps) r.steps.push_back(p.forward(std::vector<int32_t>{t}));
  return r;
}

// Batched: one pipeline, B slots; a decoy sequence is prefilled first and closed before the decode
// steps (its pages, stale, go to the others); prompts prefilled one by one; then kSteps steps of all B.
struct BatchRun {
  std::vector<int> devices;
  bool reverse_order = false;
  bool graph = false;            // decode steps as a CUDA graph (overflow check off)
  bool unchecked = false;        // direct steps with the overflow check off: the indexer on the side stream, as
                                 // `mlaconf bench` runs them
  int64_t* replays = nullptr;    // out: graph replays
  cuda::KernelConfig kernels;    // the alone runs' too
};
std::vector<SeqLogits> batched(const GgufFile& f, const ModelConfig& c, int64_t B, int64_t ctx, const BatchRun& run) {
  const bool reverse_order = run.reverse_order;
  cuda::PipelineOptions o;
  static_cast<cuda::KernelConfig&>(o) = run.kernels;
  o.max_ctx = ctx;
  o.max_seqs = B + 1;
  o.page_rows = kPageRows;
  o.devices = run.devices;
  o.decode_graph = run.graph;
  o.overflow_check = !run.graph && !run.unchecked;
  cuda::Pipeline p(f, c, o);
  const int decoy = p.open_sequence();
  {
    std::vector<int32_t> ids((size_t)std::min<int64_t>(50, ctx));  // within max_ctx at small B too
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = (int32_t)((i * 7919) % (size_t)c.n_vocab);
    p.prefill(decoy, ids);
  }
  std::vector<int> seqs((size_t)B);
  std::vector<SeqInput> in;
  std::vector<SeqLogits> out((size_t)B);
  for (int64_t b = 0; b < B; ++b) {
    in.push_back(seq_input(b, c.n_vocab, c.indexer_top_k));
    seqs[(size_t)b] = p.open_sequence();
    out[(size_t)b].prompt = p.prefill(seqs[(size_t)b], in.back().prompt);
    EXPECT_EQ(p.sequence_length(seqs[(size_t)b]), (int64_t)in.back().prompt.size());
  }
  p.close_sequence(decoy);
  // Rows in slot order, or reversed (row b is not slot b: the page tables must follow the rows).
  std::vector<int64_t> order((size_t)B);
  for (int64_t b = 0; b < B; ++b) order[(size_t)b] = reverse_order ? B - 1 - b : b;
  for (int64_t s = 0; s < kSteps; ++s) {
    std::vector<int> ss;
    std::vector<int32_t> ids;
    for (int64_t b : order) {
      ss.push_back(seqs[(size_t)b]);
      ids.push_back(in[(size_t)b].steps[(size_t)s]);
    }
    const std::vector<float> lg = p.decode_step(ss, ids);
    EXPECT_EQ((int64_t)lg.size(), B * c.n_vocab);
    for (int64_t r = 0; r < B; ++r)
      out[(size_t)order[(size_t)r]].steps.emplace_back(lg.begin() + r * c.n_vocab, lg.begin() + (r + 1) * c.n_vocab);
  }
  if (run.replays) *run.replays = p.graph_replays();
  return out;
}

double nmse_f(const std::vector<float>& a, const std::vector<float>& b) {
  return nmse(a, std::vector<double>(b.begin(), b.end()));
}

// Every sequence of the batch against its alone run: prompt and step logits bit-identical.
void expect_equal_to_alone(const std::vector<SeqLogits>& got, const std::vector<SeqLogits>& ref, const std::string& what) {
  size_t differ = 0, total = 0;
  double worst = 0;
  for (size_t b = 0; b < got.size(); ++b) {
    differ += n_differ(got[b].prompt, ref[b].prompt);
    total += ref[b].prompt.size();
    ASSERT_EQ(got[b].steps.size(), ref[b].steps.size());
    for (size_t s = 0; s < ref[b].steps.size(); ++s) {
      ASSERT_TRUE(all_finite(got[b].steps[s])) << what << ": sequence " << b << " step " << s;
      const size_t d = n_differ(got[b].steps[s], ref[b].steps[s]);
      if (d) worst = std::max(worst, nmse_f(got[b].steps[s], ref[b].steps[s]));
      EXPECT_EQ(d, 0u) << what << ": sequence " << b << " step " << s << ": " << d << " logits differ (NMSE "
                       << nmse_f(got[b].steps[s], ref[b].steps[s]) << ")";
      differ += d;
      total += ref[b].steps[s].size();
    }
  }
  EXPECT_EQ(differ, 0u) << what;
  std::printf("  %s: %zu of %zu logits differ from decoding alone (worst step NMSE %.3g)\n", what.c_str(), differ, total, worst);
}


// Each of the first max(Bs) sequences decoded alone (the expectation of every batched run of a model).
struct AloneRefs {
  GgufFile f;
  ModelConfig c;
  int64_t ctx = 0;
  std::vector<SeqLogits> ref;
  std::vector<SeqLogits> first(int64_t B) const { return {ref.begin(), ref.begin() + B}; }
};
AloneRefs alone_refs(const std::string& model, const std::vector<int64_t>& Bs, const cuda::KernelConfig& k) {
  AloneRefs r{GgufFile::open(model), {}, 0, {}};
  r.c = ModelConfig::from_gguf(r.f);
  const int64_t Bmax = *std::max_element(Bs.begin(), Bs.end());
  r.ctx = max_len(Bmax, r.c.n_vocab, r.c.indexer_top_k);
  for (int64_t b = 0; b < Bmax; ++b) r.ref.push_back(alone(r.f, r.c, seq_input(b, r.c.n_vocab, r.c.indexer_top_k), r.ctx, k));
  return r;
}

// The tensor-core GEMV at every Q4_K / Q6_K shape (the tiny dims are below the default's threshold).
cuda::KernelConfig mma_kernels() {
  cuda::KernelConfig k;
  k.gemv = cuda::GemvKernel::Mma;
  return k;
}

void check_model(const std::string& model, const std::vector<int64_t>& Bs, const cuda::KernelConfig& k = {}) {
  const AloneRefs a = alone_refs(model, Bs, k);
  for (int64_t B : Bs) {
    BatchRun run;
    run.kernels = k;
    run.reverse_order = B % 2 == 1;
    const std::vector<SeqLogits> got = batched(a.f, a.c, B, a.ctx, run);
    expect_equal_to_alone(got, a.first(B), std::filesystem::path(model).filename().string() + " B=" + std::to_string(B));
    // Negative control: sequence 0's steps against sequence 1's (another sequence must differ).
    if (B >= 2) {
      EXPECT_GT(n_differ(got[0].steps[0], a.ref[1].steps[0]), got[0].steps[0].size() / 2);
    }
  }
}

// Synthesized glm-dsa models, each made once per process through the CLI (MLACONF_CLI) and removed at exit:
//   kOddName: odd sizes: 5 heads, 2 indexer heads, top_k 16, layers F S F S (layers 1 and 3 read the selection
//     of 0 and 2: absolute rows shared across layers), a vocabulary of 20000 (greedy picks over chunks:
//     argmax_rows' two-launch path, whose work memory is sized outside the graph);
//   kShexpName: the tiny dims with every expert and shared-expert matrix Q4_K, so that under the tensor-core
//     GEMV a one-token step runs the shared expert as one more entry of the experts' launches (id -1).
constexpr const char* kOddName = "synth_h5_hi2_topk16_FSFS";
constexpr const char* kShexpName = "synth_q4k_exps_shexp";
std::string synth_model(const std::string& name) {
  static struct Owned {
    std::string dir;
    std::map<std::string, std::string> path;  // "" when synth failed
    ~Owned() {
      if (!dir.empty()) std::filesystem::remove_all(dir);
    }
  } owned;
  if (auto it = owned.path.find(name); it != owned.path.end()) return it->second;
  if (owned.dir.empty()) {
    owned.dir = (std::filesystem::temp_directory_path() / ("mlaconf-batch-" + std::to_string(getpid()))).string();
    std::filesystem::create_directories(owned.dir);
  }
  const std::string args = name == kOddName
                               ? "--seed 11 --n-head 5 --indexer-heads 2 --top-k 16 --indexer-types FSFS --vocab 20000"
                               : "--seed 12 --type _exps=Q4_K --type _shexp=Q4_K";
  const std::string m = owned.dir + "/" + name + ".gguf";
  std::string& got = owned.path[name];
  if (sh(cli() + " synth --arch glm-dsa " + args + " -o " + m + " >/dev/null") == 0) got = m;
  return got;
}

// kShexpName's premise (else its cases would pass without the path they are for): layer 1's experts and shared
// expert all Q4_K, one shared expert, and the GEMV taking an id of -1 at their shapes.
void expect_shexp_as_entry(const std::string& model) {
  GgufFile f = GgufFile::open(model);
  const ModelConfig c = ModelConfig::from_gguf(f);
  ASSERT_EQ(c.n_expert_shared, 1);
  for (const char* n : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"}) {
    const TensorInfo* t = f.find_tensor(std::string("blk.1.") + n + ".weight");
    ASSERT_NE(t, nullptr) << n;
    EXPECT_EQ(t->type, GgmlType::Q4_K) << n;
  }
  EXPECT_TRUE(cuda::gemv_experts_mma_ok(GgmlType::Q4_K, c.n_ff_exp, c.n_embd, cuda::GemvKernel::Mma));
  EXPECT_TRUE(cuda::gemv_experts_mma_ok(GgmlType::Q4_K, c.n_embd, c.n_ff_exp, cuda::GemvKernel::Mma));
}

// The model of a case by its name in the case: "" (with the reason in *why) when it is not there.
std::string model_of(const std::string& name, std::string* why) {
  if (name == kOddName || name == kShexpName) {
    if (!std::filesystem::exists(cli())) return *why = cli() + " not built (needed to synthesize)", "";
    const std::string m = synth_model(name);
    if (m.empty()) *why = "synth failed";
    return m;
  }
  if (!std::filesystem::exists(tiny_model())) return *why = tiny_model() + " is absent", "";
  return tiny_model();
}

// The layer split: batched on virtual devices (`stages` times device 0) equals batched unsplit, bit for bit.
void check_split(const std::string& model, int64_t B, int stages) {
  GgufFile f = GgufFile::open(model);
  ModelConfig c = ModelConfig::from_gguf(f);
  const int64_t ctx = max_len(B, c.n_vocab, c.indexer_top_k);
  const std::vector<SeqLogits> base = batched(f, c, B, ctx, {});
  BatchRun run;
  run.devices = std::vector<int>((size_t)stages, 0);
  const std::vector<SeqLogits> split = batched(f, c, B, ctx, run);
  expect_equal_to_alone(split, base, "B=" + std::to_string(B) + " on " + std::to_string(stages) + " virtual devices vs unsplit");
}

// Decode steps as a CUDA graph (PipelineOptions::decode_graph): the first step of a B runs directly,
// the second captures, the rest replay; routing runs on the device and the indexer over max_ctx keys.
// Every step equals decoding alone (forward()) bit for bit, hence the direct batched path too; the
// graph must have run every step after the first (kSteps - 1 launches per B).
void check_graph(const std::string& model, const std::vector<int64_t>& Bs, const cuda::KernelConfig& k = {}) {
  const AloneRefs a = alone_refs(model, Bs, k);
  for (int64_t B : Bs) {
    int64_t replays = 0;
    BatchRun run;
    run.kernels = k;
    run.graph = true;
    run.replays = &replays;
    const std::vector<SeqLogits> got = batched(a.f, a.c, B, a.ctx, run);
    expect_equal_to_alone(got, a.first(B), std::filesystem::path(model).filename().string() + " graph B=" + std::to_string(B));
    EXPECT_EQ(replays, kSteps - 1) << "the decode graph did not run every step after the first";
  }
}

// Direct steps without the overflow check (each full layer's indexer on the side stream, beside the query path):
// each sequence bit-identical to decoding it alone.
void check_unchecked(const std::string& model, const std::vector<int64_t>& Bs, const cuda::KernelConfig& k = {}) {
  const AloneRefs a = alone_refs(model, Bs, k);
  for (int64_t B : Bs) {
    BatchRun run;
    run.kernels = k;
    run.unchecked = true;
    run.reverse_order = B % 2 == 1;
    const std::vector<SeqLogits> got = batched(a.f, a.c, B, a.ctx, run);
    expect_equal_to_alone(got, a.first(B), std::filesystem::path(model).filename().string() + " unchecked B=" + std::to_string(B));
  }
}

void check_misuse(const std::string& model) {
  GgufFile f = GgufFile::open(model);
  ModelConfig c = ModelConfig::from_gguf(f);
  {
    cuda::Pipeline p(f, c, {});
    EXPECT_THROW(p.open_sequence(), InputError) << "max_seqs = 0: no batched API";
  }
  cuda::PipelineOptions o;
  o.max_ctx = 64;
  o.max_seqs = 2;
  o.page_rows = 16;
  o.pool_pages = 5;  // 80 rows for two sequences of up to 64
  cuda::Pipeline p(f, c, o);
  const int a = p.open_sequence(), b = p.open_sequence();
  EXPECT_THROW(p.open_sequence(), InputError) << "all slots open";
  p.prefill(a, std::vector<int32_t>(40, 3));
  EXPECT_THROW(p.prefill(b, std::vector<int32_t>(60, 3)), InputError) << "pool exhausted (2 pages left, 4 needed)";
  EXPECT_THROW(p.decode_step(std::vector<int>{a, a}, std::vector<int32_t>{1, 2}), InputError) << "a sequence twice";
  EXPECT_THROW(p.decode_step(std::vector<int>{a}, std::vector<int32_t>{1, 2}), InputError) << "tokens != sequences";
  EXPECT_THROW(p.decode_step(std::vector<int>{a}, std::vector<int32_t>{(int32_t)c.n_vocab}), InputError) << "token id";
  p.close_sequence(b);
  EXPECT_THROW(p.decode_step(std::vector<int>{b}, std::vector<int32_t>{1}), InputError) << "closed sequence";
  EXPECT_THROW(p.prefill(a, std::vector<int32_t>(30, 3)), InputError) << "beyond max_ctx";
  EXPECT_EQ(p.sequence_length(a), 40);
}

// The greedy tests' pipeline: 256 positions, max_seqs slots, small pages; graph steps need the overflow check off.
cuda::PipelineOptions greedy_options(int64_t max_seqs, bool graph, bool overflow_check) {
  cuda::PipelineOptions o;
  o.max_ctx = 256;
  o.max_seqs = max_seqs;
  o.page_rows = kPageRows;
  o.decode_graph = graph;
  o.overflow_check = overflow_check;
  return o;
}

// decode_step_greedy: the device's greedy picks equal core/argmax.h's on the logits decode_step returns,
// step by step, for twin sequences (the same prompts and tokens, in two halves of one pipeline: each
// row's logits do not depend on the batch, so the twins' logits are the same bits).
void check_greedy(const std::string& model, int64_t B, bool graph) {
  GgufFile f = GgufFile::open(model);
  ModelConfig c = ModelConfig::from_gguf(f);
  cuda::Pipeline p(f, c, greedy_options(2 * B, graph, !graph));
  std::vector<int> a, g;
  std::vector<SeqInput> in;
  for (int64_t b = 0; b < B; ++b) {
    in.push_back(seq_input(b, c.n_vocab, c.indexer_top_k));
    in.back().prompt.resize(std::min<size_t>(in.back().prompt.size(), 100));
    a.push_back(p.open_sequence());
    g.push_back(p.open_sequence());
    p.prefill(a.back(), in.back().prompt);
    p.prefill(g.back(), in.back().prompt);
  }
  int64_t differ = 0;
  for (int64_t s = 0; s < kSteps; ++s) {
    std::vector<int32_t> ids;
    for (int64_t b = 0; b < B; ++b) ids.push_back(in[(size_t)b].steps[(size_t)s]);
    const std::vector<float> lg = p.decode_step(a, ids);
    const std::vector<int32_t> picks = p.decode_step_greedy(g, ids);
    ASSERT_EQ((int64_t)picks.size(), B);
    for (int64_t b = 0; b < B; ++b) differ += picks[(size_t)b] != argmax_lower(lg.data() + b * c.n_vocab, (size_t)c.n_vocab);
  }
  EXPECT_EQ(differ, 0) << differ << " of " << B * kSteps << " device greedy picks differ from the host's on the same logits";
}

// Greedy graph decode: the step after the first captures the graph (one replay), every later step replays it,
// and the picks equal direct greedy steps'. A kernel whose work memory is sized after the pass (argmax_rows) must
// not delay the capture: until 2026-12-02 it moved the workspace generation after the warm step was recorded,
// so the second step ran warm again and the capture came one step late (and into `mlaconf bench`'s timed steps).
void check_greedy_capture(const std::string& model, int64_t B) {
  GgufFile f = GgufFile::open(model);
  ModelConfig c = ModelConfig::from_gguf(f);
  std::vector<std::vector<int32_t>> picks[2];
  int64_t replays_after[2] = {0, 0};
  for (int graph = 0; graph < 2; ++graph) {
    cuda::Pipeline p(f, c, greedy_options(B, graph == 1, graph == 0));
    std::vector<int> seqs;
    std::vector<SeqInput> in;
    for (int64_t b = 0; b < B; ++b) {
      in.push_back(seq_input(b, c.n_vocab, c.indexer_top_k));
      in.back().prompt.resize(std::min<size_t>(in.back().prompt.size(), 60));
      seqs.push_back(p.open_sequence());
      p.prefill(seqs.back(), in.back().prompt);
    }
    for (int64_t s = 0; s < kSteps; ++s) {
      std::vector<int32_t> ids;
      for (int64_t b = 0; b < B; ++b) ids.push_back(in[(size_t)b].steps[(size_t)s]);
      picks[graph].push_back(p.decode_step_greedy(seqs, ids));
      if (s == 1) replays_after[graph] = p.graph_replays();
    }
  }
  EXPECT_EQ(replays_after[1], 1) << "the graph was not captured (and replayed) on the second greedy step";
  EXPECT_EQ(picks[0], picks[1]) << "graph greedy picks differ from direct ones";
}

// decode_steps_greedy: n chained steps give the picks of n decode_step_greedy calls, each fed the previous
// call's picks, and leave the same state behind (the next step's logits are the same bits), for twin sequences
// in two halves of one pipeline. With graphs the twins' one-by-one steps warm and capture the B-row graph, so
// every chained step is a replay queued one ahead (counted: graph_replays), its tokens fed on the device; a
// wrong feed (the previous step's tokens, or zeros) or a step queued before its tables changes the picks.
void check_chained_greedy(const std::string& model, int64_t B, bool graph) {
  GgufFile f = GgufFile::open(model);
  ModelConfig c = ModelConfig::from_gguf(f);
  cuda::Pipeline p(f, c, greedy_options(2 * B, graph, false));
  std::vector<int> a, g;
  std::vector<int32_t> first;
  for (int64_t b = 0; b < B; ++b) {
    SeqInput in = seq_input(b, c.n_vocab, c.indexer_top_k);
    in.prompt.resize(std::min<size_t>(in.prompt.size(), 90));
    a.push_back(p.open_sequence());
    g.push_back(p.open_sequence());
    p.prefill(a.back(), in.prompt);
    p.prefill(g.back(), in.prompt);
    first.push_back(in.steps[0]);
  }
  std::vector<std::vector<int32_t>> one;
  std::vector<int32_t> next = first;
  for (int64_t s = 0; s < kSteps; ++s) one.push_back(next = p.decode_step_greedy(a, next));
  const int64_t replays0 = p.graph_replays();
  const std::vector<std::vector<int32_t>> chained = p.decode_steps_greedy(g, first, kSteps);
  if (graph) {
    EXPECT_EQ(p.graph_replays() - replays0, kSteps) << "not every chained step replayed the graph";
  }
  ASSERT_EQ(chained.size(), one.size());
  for (int64_t s = 0; s < kSteps; ++s) EXPECT_EQ(chained[(size_t)s], one[(size_t)s]) << "step " << s;
  for (int64_t b = 0; b < B; ++b) EXPECT_EQ(p.sequence_length(g[(size_t)b]), p.sequence_length(a[(size_t)b])) << "row " << b;
  const std::vector<float> la = p.decode_step(a, next), lg = p.decode_step(g, next);
  ASSERT_EQ(la.size(), lg.size());
  EXPECT_EQ(std::memcmp(la.data(), lg.data(), la.size() * 4), 0) << "the step after the chained ones differs from the twins'";
  EXPECT_TRUE(p.decode_steps_greedy(g, first, 0).empty());
  EXPECT_THROW(p.decode_steps_greedy(g, first, -1), InputError);
  EXPECT_THROW(p.decode_steps_greedy(std::vector<int>{g[0], g[0]}, std::vector<int32_t>{1, 1}, 2), InputError) << "a sequence twice";
}

// A copy of `model` (under dir) whose output_norm.weight starts with NaN: every row's final norm, so every
// logit, is NaN, and every greedy pick -1.
std::string nan_logits_copy(const std::string& model, const std::string& dir) {
  GgufFile f = GgufFile::open(model);
  const TensorInfo& t = f.tensor("output_norm.weight");
  if (t.type != GgmlType::F32 || f.shards().size() != 1) return "";
  const uint64_t at = f.shards()[0].data_offset + t.offset;
  const std::string out = dir + "/nan_logits.gguf";
  std::filesystem::copy_file(model, out, std::filesystem::copy_options::overwrite_existing);
  FILE* fp = std::fopen(out.c_str(), "r+b");
  if (!fp) return "";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const bool ok = std::fseek(fp, (long)at, SEEK_SET) == 0 && std::fwrite(&nan, 4, 1, fp) == 1;
  return std::fclose(fp) == 0 && ok ? out : "";
}

// A step whose picks hold -1 (NaN logits) ends decode_steps_greedy after it, as decode_step_greedy would refuse
// that token next: one row of picks, and the sequences advanced by that one step only, as twins that took one
// decode_step_greedy. chained = 0: the graph not yet captured (the steps one by one); 1: warmed and captured on a
// third set, so that the chain starts at once and the step queued behind the -1 (on tokens 0) is discarded.
void check_chained_greedy_stop(const std::string& model, bool chained_from_start) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("mlaconf-nan-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  struct Rm {
    std::string d;
    ~Rm() { std::filesystem::remove_all(d); }
  } rm{dir};
  const std::string nm = nan_logits_copy(model, dir);
  ASSERT_FALSE(nm.empty()) << "could not write the NaN copy of " << model;
  GgufFile f = GgufFile::open(nm);
  ModelConfig c = ModelConfig::from_gguf(f);
  const int64_t B = 2;
  cuda::Pipeline p(f, c, greedy_options(3 * B, true, false));
  std::vector<int> a, g, w;
  std::vector<int32_t> first;
  for (int64_t b = 0; b < B; ++b) {
    SeqInput in = seq_input(b, c.n_vocab, c.indexer_top_k);
    in.prompt.resize(std::min<size_t>(in.prompt.size(), 40));
    for (auto* v : {&a, &g, &w}) {
      v->push_back(p.open_sequence());
      p.prefill(v->back(), in.prompt);
    }
    first.push_back(in.steps[0]);
  }
  if (chained_from_start) {
    p.decode_step_greedy(w, first);
    p.decode_step_greedy(w, first);
    ASSERT_EQ(p.graph_replays(), 1) << "the graph was not captured on the second step";
  }
  const std::vector<int32_t> one = p.decode_step_greedy(a, first);
  ASSERT_EQ(one, std::vector<int32_t>(B, -1)) << "the NaN copy's picks are not -1: the case tests nothing";
  const int64_t replays0 = p.graph_replays();
  const std::vector<std::vector<int32_t>> chained = p.decode_steps_greedy(g, first, 4);
  ASSERT_EQ(chained.size(), 1u) << "decode_steps_greedy did not stop after the step that picked -1";
  EXPECT_EQ(chained[0], one);
  if (chained_from_start) {
    EXPECT_EQ(p.graph_replays() - replays0, 2) << "the chain did not queue the next step before it saw the -1";
  }
  for (int64_t b = 0; b < B; ++b) EXPECT_EQ(p.sequence_length(g[(size_t)b]), p.sequence_length(a[(size_t)b])) << "row " << b;
}

// argmax_rows against core/argmax.h on rows built to break a careless pick: the maximum repeated (ties to
// the lower id), NaN before and at the maximum, -0 and +0 as the maximum, -inf only, all NaN (-1), one
// value, a maximum in the last slot; widths off the CTA's 1024 threads.
void check_argmax_rows() {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-4, 4);
  for (int64_t n : {1, 3, 1023, 1025, 8191, 8192, 8193, 154880}) {  // from 8192 on: over chunks of 4096 (two launches)
    std::vector<float> r((size_t)n);
    for (auto& v : r) v = u(rng);
    rows.push_back(r);
    auto tie = r;
    tie[n / 2] = 9.f;
    tie[n - 1] = 9.f;
    if (n > 3) tie[n / 3] = 9.f;
    rows.push_back(tie);
    auto with_nan = tie;
    with_nan[0] = nan;
    if (n > 3) with_nan[n / 3] = nan;
    rows.push_back(with_nan);
    auto last = r;
    last[n - 1] = 100.f;
    rows.push_back(last);
  }
  rows.push_back({-0.f, 0.f, -1.f});
  rows.push_back({-1.f, 0.f, -0.f});
  rows.push_back({-inf, -inf, -inf});
  rows.push_back({nan, nan, nan});
  rows.push_back({nan, -inf, nan});
  for (const auto& r : rows) {
    auto d_x = cuda::to_device(r);
    cuda::DeviceBuffer d_o(4);
    cuda::argmax_rows(d_x.as<float>(), 1, (int64_t)r.size(), d_o.as<int32_t>());
    EXPECT_EQ(cuda::to_host<int32_t>(d_o, 1)[0], argmax_lower(r.data(), r.size())) << "row of " << r.size();
  }
  // Several rows in one launch.
  std::vector<float> m(3 * 2000);
  for (auto& v : m) v = u(rng);
  m[1999] = 50.f, m[2000 + 7] = 50.f, m[2000 + 8] = 50.f, m[4000] = nan;
  auto d_m = cuda::to_device(m);
  cuda::DeviceBuffer d_o(3 * 4);
  cuda::argmax_rows(d_m.as<float>(), 3, 2000, d_o.as<int32_t>());
  const auto got = cuda::to_host<int32_t>(d_o, 3);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(got[(size_t)r], argmax_lower(m.data() + r * 2000, 2000)) << "row " << r;
  // Several rows over chunks: the maximum tied across chunks (the lower index wins, whichever chunk's candidate
  // is merged first), a chunk of NaN only, the maximum in the last partial chunk.
  const int64_t n = 20000;
  std::vector<float> mc(4 * n);
  for (auto& v : mc) v = u(rng);
  mc[4096 + 5] = 60.f, mc[3 * 4096 + 1] = 60.f;                              // row 0: ties in chunks 1 and 3
  for (int64_t i = 0; i < 4096; ++i) mc[n + i] = nan;                         // row 1: chunk 0 all NaN
  mc[n + 19999] = 70.f;                                                       // row 1: the last value
  mc[2 * n + 7] = 80.f, mc[2 * n + 19998] = 80.f;                              // row 2: first and last chunk
  for (int64_t i = 0; i < n; ++i) mc[3 * n + i] = i % 4096 == 17 ? 1.f : -1.f;  // row 3: one tie per chunk
  auto d_mc = cuda::to_device(mc);
  cuda::DeviceBuffer d_oc(4 * 4);
  cuda::argmax_rows(d_mc.as<float>(), 4, n, d_oc.as<int32_t>());
  const auto gotc = cuda::to_host<int32_t>(d_oc, 4);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(gotc[(size_t)r], argmax_lower(mc.data() + r * n, (size_t)n)) << "chunked row " << r;
}

// Registration under canonical case names (suites/common/case_registry.h), suite "batch".
void run_case(const std::string& model_name, const std::function<void(const std::string&)>& body) {
  MLACONF_REQUIRE_CUDA();
  std::string why;
  const std::string m = model_of(model_name, &why);
  if (m.empty()) GTEST_SKIP() << "skipped: " << why;
  body(m);
}

const bool registered = [] {
  using test::CaseName;
  for (const char* model : {"glm_dsa_tiny", kOddName}) {
    const std::string mn = model;
    for (int64_t B : {1, 3, 8, 33})
      register_case("batch", CaseName("batched_decode").p("model", mn).p("B", B).str(),
                    [mn, B] { run_case(mn, [B](const std::string& m) { check_model(m, {B}); }); });
    for (int64_t B : mn == kOddName ? std::vector<int64_t>{3, 8} : std::vector<int64_t>{1, 8, 33})
      register_case("batch", CaseName("batched_decode_graph").p("model", mn).p("B", B).str(),
                    [mn, B] { run_case(mn, [B](const std::string& m) { check_graph(m, {B}); }); });
    for (int64_t B : {1, 8})
      register_case("batch", CaseName("batched_decode_unchecked").p("model", mn).p("B", B).str(),
                    [mn, B] { run_case(mn, [B](const std::string& m) { check_unchecked(m, {B}); }); });
  }
  // The tensor-core GEMV (GLM-5's Q4_K / Q6_K matrices; the tiny model's are below the default's threshold)
  // pinned for every Q4_K / Q6_K matrix: each sequence still the bits of decoding it alone.
  register_case("batch", CaseName("batched_decode").p("model", "glm_dsa_tiny").p("B", 8).p("gemv", "mma").str(), [] {
    run_case("glm_dsa_tiny", [](const std::string& m) { check_model(m, {8}, mma_kernels()); });
  });
  // B = 3 with the grouping off (KernelConfig::group_experts false): the experts by id at several tokens, the path
  // GLM-5 takes below 8 tokens (these dims group from 2).
  register_case("batch", CaseName("batched_decode").p("model", kShexpName).p("B", 3).p("gemv", "mma").p("grouping", "off").str(), [] {
    run_case(kShexpName, [](const std::string& m) {
      cuda::KernelConfig k = mma_kernels();
      k.group_experts = false;
      check_model(m, {3}, k);
    });
  });
  // The shared expert as entry k of the experts' launches (one-token steps, the tensor-core GEMV): each
  // sequence still the bits of decoding it alone (forward() runs the shared expert as a matrix of its own);
  // B = 3 has no one-token step and runs it by itself.
  // B = 3 and 8: 12 and 32 pairs on 16 experts, grouped by expert (Pipeline group_experts: from 1 pick per 4 experts).
  for (int64_t B : {1, 3, 8})
    register_case("batch", CaseName("batched_decode").p("model", kShexpName).p("B", B).p("gemv", "mma").str(), [B] {
      run_case(kShexpName, [B](const std::string& m) {
        expect_shexp_as_entry(m);
        check_model(m, {B}, mma_kernels());
      });
    });
  for (const char* kind : {"graph", "unchecked"})
    for (int64_t B : {1, 8})
      register_case("batch", CaseName(std::string("batched_decode_") + kind).p("model", kShexpName).p("B", B).p("gemv", "mma").str(),
                    [kind, B] {
                      run_case(kShexpName, [kind, B](const std::string& m) {
                        expect_shexp_as_entry(m);
                        if (std::string(kind) == "graph") check_graph(m, {B}, mma_kernels());
                        else check_unchecked(m, {B}, mma_kernels());
                      });
                    });
  for (int stages : {2, 3})
    register_case("batch", CaseName("batched_decode_split").p("model", "glm_dsa_tiny").p("B", 8).p("stages", stages).str(),
                  [stages] { run_case("glm_dsa_tiny", [stages](const std::string& m) { check_split(m, 8, stages); }); });
  register_case("batch", CaseName("batched_decode_misuse").p("model", "glm_dsa_tiny").str(),
                [] { run_case("glm_dsa_tiny", [](const std::string& m) { check_misuse(m); }); });
  for (bool graph : {false, true})
    for (int64_t B : {1, 5})
      register_case("batch", CaseName("greedy_on_device").p("model", "glm_dsa_tiny").p("B", B).p("graph", graph ? 1 : 0).str(),
                    [B, graph] { run_case("glm_dsa_tiny", [B, graph](const std::string& m) { check_greedy(m, B, graph); }); });
  register_case("batch", CaseName("greedy_graph_capture").p("model", kOddName).p("B", 3).str(),
                [] { run_case(kOddName, [](const std::string& m) { check_greedy_capture(m, 3); }); });
  for (const char* model : {"glm_dsa_tiny", kOddName})
    for (bool graph : {false, true})
      register_case("batch", CaseName("greedy_chained").p("model", model).p("B", 3).p("graph", graph ? 1 : 0).str(),
                    [model, graph] { run_case(model, [graph](const std::string& m) { check_chained_greedy(m, 3, graph); }); });
  for (bool chained : {false, true})
    register_case("batch", CaseName("greedy_chained_stop").p("model", "glm_dsa_tiny").p("logits", "nan").p("chained", chained ? 1 : 0).str(),
                  [chained] { run_case("glm_dsa_tiny", [chained](const std::string& m) { check_chained_greedy_stop(m, chained); }); });
  register_case("batch", "argmax_rows(rules=ties_nan_zero_inf,cols=1..154880)", [] {
    MLACONF_REQUIRE_CUDA();
    check_argmax_rows();
  });
  return true;
}();

}  // namespace
}  // namespace mlaconf::gputest
