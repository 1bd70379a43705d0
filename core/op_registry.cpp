// mlaconf: the op registry's rows (see op_registry.h). Adding a dataset: add its row here, in forward
// order among its level; fixtures/SCHEMA.md "Adding a dataset" says what follows from it.
#include "core/op_registry.h"

#include <iterator>

namespace mlaconf {
namespace {

using DL = DatasetLevel;
using St = Storage;
using TC = TolClass;
using K = LayerKind;
using Ta = Taint;
using P = Panel;

// clang-format off
// name, level, storage, class, shape, row axis, layer kind, taint, panel, oracle, meaning,
//   replay inputs, replay inputs on MoE layers, computed by,
//   hf, llama.cpp, reference, cuda, tests
constexpr OpRow kRows[] = {
    // ---- case level, in the order a pass and a generation produce them -------------------------------
    {"input_ids", DL::Case, St::Index, TC::ExactIds, "T", 0, K::Any, Ta::None, P::None, true,
     "the tokens of the pass (decode: the one token)", "", "", "",
     "input_ids", "", "", "", "fixtures/Compare.CasesMapByInputIdsWhenNamesDiffer"},
    {"final_norm", DL::Case, St::Float, TC::Activation, "T,E", 0, K::Any, Ta::ModelOutput, P::None, true,
     "output_norm(last layer output)", "", "", "",
     "model.norm", "result_norm", "rmsnorm", "rmsnorm", "reference/oracle_forward"},
    {"logits", DL::Case, St::Float, TC::Logits, "T,V", 0, K::Any, Ta::ModelOutput, P::None, true,
     "lm_head(final_norm)", "", "", "",
     "lm_head", "result_output", "linear_blocked", "linear", "reference/oracle_forward gpu/model_layers"},
    {"step_indexer_topk", DL::Case, St::Index, TC::IndexSet, "n,*,K", 0, K::Any, Ta::None, P::None, true,
     "greedy: indexer top-k of the last position [step, indexer layer, k]", "", "", "",
     "", "", "topk_lower_index", "topk_rows", "reference/oracle_greedy"},
    {"step_indexer_topk_gap", DL::Case, St::Gap, TC::Info, "n,*", 0, K::Any, Ta::None, P::None, true,
     "greedy: its K-th minus (K+1)-th score", "", "", "",
     "", "", "topk_lower_index", "topk_extras", "reference/oracle_greedy"},
    {"step_indexer_topk_tie", DL::Case, St::Flag, TC::Info, "n,*", 0, K::Any, Ta::None, P::None, true,
     "greedy: 1 = exact tie at the cut", "", "", "",
     "", "", "topk_lower_index", "topk_extras", "reference/oracle_greedy"},
    {"step_router_ids", DL::Case, St::Index, TC::IndexSet, "n,*,U", 0, K::Any, Ta::None, P::None, true,
     "greedy: router ids [step, MoE layer, k]", "", "", "",
     "model.layers.{l}.mlp.gate", "", "moe_route", "route", "reference/oracle_greedy"},
    {"step_router_weights", DL::Case, St::Float, TC::RouterWeights, "n,*,U", 0, K::Any, Ta::None, P::None, true,
     "greedy: router weights, same order", "", "", "",
     "model.layers.{l}.mlp.gate", "", "moe_route", "route", "reference/oracle_greedy"},
    {"step_router_topk_gap", DL::Case, St::Gap, TC::Info, "n,*", 0, K::Any, Ta::None, P::None, false,
     "greedy: router U-th minus (U+1)-th selection score (mlaconf only)", "", "", "",
     "", "", "moe_route", "route", "reference/oracle_greedy"},
    {"step_logits", DL::Case, St::Float, TC::Logits, "n,V", 0, K::Any, Ta::None, P::None, true,
     "logits of the last position at each step", "", "", "",
     "lm_head", "", "generate", "linear", "reference/oracle_greedy"},
    {"tokens", DL::Case, St::Index, TC::ExactIds, "n", 0, K::Any, Ta::None, P::None, true,
     "greedy: generated ids (argmax, ties to the lower id)", "", "", "",
     "", "", "generate", "argmax_rows", "reference/oracle_greedy gpu/model_greedy"},
    {"margins", DL::Case, St::Gap, TC::Info, "n", 0, K::Any, Ta::None, P::None, true,
     "greedy: top-1 minus top-2 logit of each step", "", "", "",
     "", "", "generate", "", "reference/oracle_greedy"},
    {"all_ids", DL::Case, St::Index, TC::ExactIds, "*", 0, K::Any, Ta::None, P::None, true,
     "greedy: prompt + generated ids [T + n]", "", "", "",
     "", "", "generate", "", "reference/oracle_greedy"},

    // ---- per layer (layers/<l>/...), in forward order -------------------------------------------------
    {"input_hidden", DL::Layer, St::Float, TC::Activation, "T,E", 0, K::Any, Ta::LayerInput, P::LayerIo, true,
     "layer input (residual stream); for l > 0 a hard link to `layers/<l-1>/output_hidden` when equal", "", "", "",
     "model.layers.{l}", "embd", "forward_layers", "embed_rows", "reference/forward_layers"},
    {"attn_norm_out", DL::Layer, St::Float, TC::Activation, "T,E", 0, K::Any, Ta::LayerInput, P::QPath, false,
     "input_layernorm(input_hidden) = x", "input_hidden", "", "",
     "", "attn_norm", "rmsnorm", "attn_norm", "reference/op_norms gpu/norms fixtures/answer(backend=reference"},
    {"q_a", DL::Layer, St::Float, TC::Activation, "T,Q", 0, K::Any, Ta::LayerInput, P::QPath, false,
     "q_a_proj x", "attn_norm_out", "", "",
     "", "qr", "linear", "q_a", "gpu/gemv fixtures/answer(backend=reference"},
    {"q_a_norm", DL::Layer, St::Float, TC::Activation, "T,Q", 0, K::Any, Ta::LayerInput, P::QPath, false,
     "RMSNorm(q_a) = cq", "q_a", "", "",
     "", "qr", "rmsnorm", "q_a_norm", "reference/op_norms gpu/norms fixtures/answer_negative(corrupt=q_a_norm"},
    {"q_b", DL::Layer, St::Float, TC::Activation, "T,H,N", 0, K::Any, Ta::LayerInput, P::QPath, false,
     "q_b_proj cq, per head [nope | rope], before RoPE", "q_a_norm", "", "",
     "", "q", "linear", "q_b", "gpu/gemv fixtures/answer(backend=reference"},
    {"q_pe_rope", DL::Layer, St::Float, TC::Activation, "T,H,R", 0, K::Any, Ta::LayerInput, P::QPath, false,
     "q_pe after RoPE", "q_b", "", "",
     "", "q_pe", "rope_heads_inplace", "q_rope", "reference/op_rope_heads gpu/rope fixtures/answer(backend=reference"},
    {"kv_a", DL::Layer, St::Float, TC::Activation, "T,C", 0, K::Any, Ta::LayerInput, P::KvPath, false,
     "kv_a_proj x = [latent | k_pe], before the norm", "attn_norm_out", "", "",
     "", "kv_cmpr_pe", "linear", "kv_a", "gpu/gemv fixtures/answer(backend=reference"},
    {"kv_latent", DL::Layer, St::Float, TC::Activation, "T,L", 0, K::Any, Ta::LayerInput, P::KvPath, false,
     "RMSNorm(kv_a[:L]) = c", "kv_a", "", "",
     "", "kv_cmpr", "mla_latent", "latent_rows", "reference/op_mla_latent fixtures/answer(backend=reference"},
    {"k_pe_rope", DL::Layer, St::Float, TC::Activation, "T,R", 0, K::Any, Ta::LayerInput, P::KvPath, false,
     "k_pe after RoPE", "kv_a", "", "",
     "", "k_pe", "mla_latent", "latent_rows", "reference/op_mla_latent fixtures/answer(backend=reference"},
    {"latent_cache", DL::Layer, St::Float, TC::Activation, "S,C", 0, K::Any, Ta::CacheRow, P::KvPath, false,
     "cache rows [c | k_pe_rope]; forward: the T new rows; **decode: the whole cache**", "", "", "",
     "", "Kcur", "mla_project", "latent_rows", "reference/decode_vs_recompute"},
    {"q_absorbed", DL::Layer, St::Float, TC::Activation, "T,H,C", 0, K::Any, Ta::LayerInput, P::QPath, false,
     "[W_UKᵀ q_nope | q_pe_rope]", "q_b q_pe_rope", "", "",
     "", "Qcur", "absorb_query_rows", "absorb", "reference/absorbed_vs_naive fixtures/answer(backend=reference"},
    {"indexer_q", DL::Layer, St::Float, TC::Activation, "T,Hi,Di", 0, K::FullIndexer, Ta::LayerInput, P::Indexer, false,
     "indexer queries after RoPE", "q_a_norm", "", "",
     "", "indexer_q", "indexer_queries", "indexer_q", "reference/op_indexer_qk_topk fixtures/answer(backend=reference"},
    {"indexer_k", DL::Layer, St::Float, TC::Activation, "S,Di", 0, K::FullIndexer, Ta::CacheRow, P::Indexer, false,
     "indexer keys after LayerNorm and RoPE; decode: the whole cache", "attn_norm_out indexer_k", "", "",
     "", "indexer_k", "indexer_keys", "indexer_k", "reference/op_indexer_qk_topk gpu/layernorm_rope fixtures/answer(backend=reference"},
    {"indexer_weights", DL::Layer, St::Float, TC::Activation, "T,Hi", 0, K::FullIndexer, Ta::LayerInput, P::Indexer, false,
     "indexer.proj x (unscaled)", "attn_norm_out", "", "",
     "", "indexer_weights", "linear", "indexer_weights", "fixtures/answer(backend=reference"},
    {"indexer_scores", DL::Layer, St::Float, TC::Scores, "T,S", 0, K::FullIndexer, Ta::ScoresEntry, P::Indexer, true,
     "lightning indexer scores, −inf for keys after the query", "indexer_q indexer_k indexer_weights", "", "",
     "model.layers.{l}.self_attn.indexer", "indexer_score", "indexer_scores", "indexer_score_rows",
     "reference/op_indexer_scores gpu/indexer_scores fixtures/answer(backend=reference"},
    {"indexer_topk", DL::Layer, St::Index, TC::IndexSet, "T,K", 0, K::Any, Ta::Decision, P::Indexer, true,
     "selected keys, ascending, −1 padded (fewer than K causal keys)", "indexer_scores", "", "",
     "model.layers.{l}.self_attn", "top_k", "topk_lower_index", "topk_rows",
     "reference/op_topk gpu/topk_exact fixtures/answer(backend=reference"},
    {"indexer_topk_tie", DL::Layer, St::Flag, TC::Info, "T", 0, K::Any, Ta::None, P::None, true,
     "1 = the K-th and (K+1)-th scores are equal", "", "", "indexer_topk",
     "", "", "topk_lower_index", "topk_extras", "reference/op_topk"},
    {"indexer_topk_gap", DL::Layer, St::Gap, TC::Info, "T", 0, K::Any, Ta::None, P::None, true,
     "K-th minus (K+1)-th score; NaN when every causal key is selected", "", "", "indexer_topk",
     "", "", "topk_lower_index", "topk_extras", "reference/op_topk"},
    {"attn_latent_out", DL::Layer, St::Float, TC::Activation, "T,H,L", 0, K::Any, Ta::AfterAttention, P::Attention, false,
     "sparse attention output in latent space: softmax over `indexer_topk` of (N^−½ q_absorbed · latent_cache) times "
     "latent_cache[:, :L]",
     "q_absorbed latent_cache indexer_topk", "", "",
     "", "", "sparse_mla_absorbed_rows", "attend",
     "reference/op_sparse_mla gpu/sparse_mla_prefill gpu/sparse_mla_decode fixtures/answer_negative(fault=dense_attention"},
    {"attn_v_out", DL::Layer, St::Float, TC::Activation, "T,H,D", 0, K::Any, Ta::AfterAttention, P::Attention, false,
     "W_UV attn_latent_out", "attn_latent_out", "", "",
     "", "kqv_out", "apply_v_up_rows", "v_up", "reference/op_mla_forms gpu/apply_wuv fixtures/answer(backend=reference"},
    {"attn_out", DL::Layer, St::Float, TC::Activation, "T,E", 0, K::Any, Ta::AfterAttention, P::Attention, true,
     "o_proj output", "attn_v_out", "", "",
     "model.layers.{l}.self_attn", "", "linear", "o_proj", "gpu/gemv fixtures/answer(backend=reference"},
    {"ffn_norm_out", DL::Layer, St::Float, TC::Activation, "T,E", 0, K::Any, Ta::AfterAttention, P::Router, false,
     "post_attention_layernorm output", "input_hidden attn_out", "", "",
     "", "ffn_norm", "rmsnorm", "ffn_norm", "gpu/add_rmsnorm fixtures/answer(backend=reference"},
    {"router_logits", DL::Layer, St::Float, TC::Activation, "T,X", 0, K::Moe, Ta::AfterAttention, P::Router, false,
     "gate x, before the sigmoid", "ffn_norm_out", "", "",
     "", "ffn_moe_logits", "linear", "router_logits", "fixtures/answer(backend=reference"},
    {"router_ids", DL::Layer, St::Index, TC::IndexSet, "T,U", 0, K::Moe, Ta::Decision, P::Router, true,
     "MoE layers: chosen experts, ascending", "router_logits", "", "",
     "model.layers.{l}.mlp.gate", "ffn_moe_topk", "moe_route", "route",
     "reference/op_router reference/op_router_random gpu/route_experts fixtures/answer(backend=reference"},
    {"router_weights", DL::Layer, St::Float, TC::RouterWeights, "T,U", 0, K::Moe, Ta::RouterWeights, P::Router, true,
     "same order, normalized and scaled", "", "", "router_ids",
     "model.layers.{l}.mlp.gate", "ffn_moe_weights_scaled", "moe_route", "route", "reference/op_router_random"},
    {"router_topk_gap", DL::Layer, St::Gap, TC::Info, "T", 0, K::Moe, Ta::None, P::None, true,
     "U-th minus (U+1)-th selection score", "", "", "router_ids",
     "", "", "moe_route", "route", "reference/op_router"},
    {"router_group_gap", DL::Layer, St::Gap, TC::Info, "T", 0, K::GroupedMoe, Ta::None, P::None, true,
     "group-limited routing only", "", "", "",
     "", "", "moe_route", "", "reference/op_router"},
    {"expert_out", DL::Layer, St::Float, TC::Activation, "T,U,E", 0, K::Moe, Ta::AfterFfn, P::Experts, false,
     "each used expert's output (unweighted), in router_ids order", "ffn_norm_out router_ids", "", "",
     "", "ffn_moe_down", "moe_ffn", "experts", "reference/op_moe_ffn gpu/gemv_experts fixtures/answer(backend=reference"},
    {"shared_expert_out", DL::Layer, St::Float, TC::Activation, "T,E", 0, K::Moe, Ta::AfterAttention, P::Experts, false,
     "shared expert output", "ffn_norm_out", "", "",
     "", "ffn_shexp", "swiglu_mlp", "shared_expert", "reference/op_moe_ffn fixtures/answer(backend=reference"},
    {"mlp_out", DL::Layer, St::Float, TC::Activation, "T,E", 0, K::Any, Ta::AfterFfn, P::Experts, true,
     "dense MLP, or routed + shared MoE output", "ffn_norm_out", "expert_out router_weights shared_expert_out", "",
     "model.layers.{l}.mlp", "ffn_out", "swiglu_mlp moe_ffn", "dense_mlp combine",
     "reference/op_moe_ffn gpu/silu_gate fixtures/answer(backend=reference"},
    {"output_hidden", DL::Layer, St::Float, TC::Activation, "T,E", 0, K::Any, Ta::AfterFfn, P::LayerIo, true,
     "input_hidden + attn_out + mlp_out", "input_hidden attn_out mlp_out", "", "",
     "model.layers.{l}", "l_out", "forward_layers", "add_inplace", "reference/forward_layers fixtures/answer(backend=reference"},
};
// clang-format on

}  // namespace

std::span<const OpRow> op_registry() { return kRows; }

const OpRow* find_op_in(std::span<const OpRow> rows, std::string_view name) {
  for (const OpRow& r : rows)
    if (name == r.name) return &r;
  return nullptr;
}

const OpRow* find_op(std::string_view name, DatasetLevel level) {
  for (const OpRow& r : kRows)
    if (r.level == level && name == r.name) return &r;
  return nullptr;
}

const OpRow* find_op(std::string_view name) {
  if (const OpRow* r = find_op(name, DatasetLevel::Layer)) return r;
  return find_op(name, DatasetLevel::Case);
}

const char* storage_name(Storage s) {
  switch (s) {
    case Storage::Float: return "float";
    case Storage::Gap: return "gap";
    case Storage::Index: return "index";
    case Storage::Flag: return "flag";
  }
  return "?";
}

const char* panel_title(Panel p) {
  switch (p) {
    case Panel::None: return "";
    case Panel::QPath: return "Q PATH";
    case Panel::KvPath: return "KV PATH (LATENT CACHE)";
    case Panel::Indexer: return "INDEXER";
    case Panel::Attention: return "ATTENTION";
    case Panel::Router: return "ROUTER";
    case Panel::Experts: return "EXPERTS AND MLP";
    case Panel::LayerIo: return "LAYER INPUT AND OUTPUT";
  }
  return "";
}

}  // namespace mlaconf
