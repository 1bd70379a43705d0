// mlaconf <-> llama.cpp: THE table from llama.cpp graph tensor names to fixture datasets.
//
// llama.cpp names its graph nodes `NAME-L` (layer L) or `NAME` (model level) when it builds the graph
// (glm-dsa: src/models/glm-dsa.cpp and src/llama-graph.cpp); the eval callback sees them by that name,
// with their ggml op. One name can be given to several nodes of a layer (e.g. `qr-L` is the q_a
// projection, a MUL_MAT, and then its RMSNorm, a MUL): an entry matches a name AND an op.
// docs/LLAMA_CPP.md is this table in prose, with what each mapping was checked against.
#pragma once
#include <string>
#include <vector>

namespace mlaconf::llamacpp {

// How the ggml tensor's values become the dataset's (values are read row-major over the reversed ne,
// ne[0] fastest: ggml [W, T] reads as [T, W]).
enum class Take {
  Rows,          // [T, ...] as read; the trailing dims are the dataset's (schema) dims
  CropKeys,      // [T, n_kv] -> [T, S]: the first S = pos0 + T cache cells (the rest are padding)
  TopK,          // I32 [T, k'] cache cells -> [T, K] ascending, cells after the row's position dropped, -1 padded
  RouterIds,     // I32 [T, U] in llama.cpp's selection order -> ascending (the order router_weights and
                 // expert_out follow)
  RouterOrder,   // [T, U, ...] in llama.cpp's selection order -> the ascending ids' order
  CacheRows,     // [T, W] rows of this pass; a decode step's dataset holds the whole cache: the rows of
                 // the earlier passes (as llama.cpp computed them) and these
  LatentPermuted,  // [H, T, L] (a permuted view: ne = [L, T, H]) -> [T, H, L]
};

struct MapEntry {
  const char* name;     // llama.cpp's name without the "-L" suffix
  const char* ops;      // ggml_op_desc values it must have, '|'-separated; "" = any
  bool per_layer;       // NAME-L (true) or NAME (false)
  const char* dataset;  // fixture dataset (core/trace.h); "layers/<L>/" is prefixed for per-layer ones
  Take take;
  const char* note;     // what the node is, in llama.cpp's graph
};

// The table. Several entries may write one dataset (e.g. router_weights: the last of
// ffn_moe_weights / _norm / _scaled that the graph has); the node computed last wins.
const std::vector<MapEntry>& tensor_map();

// Two datasets are not taken from a named node:
//   attn_out        the MUL_MAT node whose src[1] is `kqv_out-L` (the output projection, unnamed in the graph);
//   attn_latent_out src[1] of `fattn_mla-L` (the flash-attention path) or src[1] of `kqv_mla-L` (the
//                   other path): the attention output before W_UV, unnamed in the graph.
//   input_hidden    of layer 0 is `embd`; of layer L > 0 the output_hidden of layer L-1 (the same node).
inline constexpr const char* kKqvOut = "kqv_out";
inline constexpr const char* kFattnMla = "fattn_mla";
inline constexpr const char* kKqvMla = "kqv_mla";

// `name` split into base and layer ("qr-3" -> {"qr", 3}; "result_norm" -> {"result_norm", -1}).
std::pair<std::string, int> split_name(const std::string& name);

// The entry for a node, or null.
const MapEntry* find_entry(const std::string& base, int layer, const std::string& op);

}  // namespace mlaconf::llamacpp
