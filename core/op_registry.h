// mlaconf: the op registry. One row per fixture dataset: everything the project knows about it that is
// not math, in one place.
//
// The schema (fixtures/schema.cpp), the tolerance class of each dataset (fixtures/tolerances.cpp), which
// rows a differing decision taints (fixtures/attribution.cpp), the plot's panels (fixtures/png_plot.cpp),
// the forward order that names the first failure (fixtures/first_failure.cpp), the op replay table
// (tools/backend/op_table.h), the row axis of the row-by-row verdict and fixtures/SCHEMA.md's dataset
// tables are all derived from these rows. Adding a dataset is adding a row (docs: fixtures/SCHEMA.md
// "Adding a dataset").
//
// The pointer columns (reference function, CUDA pipeline op, tests, llama.cpp node) are names a reader
// can grep for; suites/fixtures/test_op_registry.cpp checks that each one exists in the tree, so they
// cannot rot. The table holds names and small enums only: no math.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/model_config.h"

namespace mlaconf {

// Where a dataset lives in a case group: at the case's root, or under layers/<l>/.
enum class DatasetLevel : uint8_t { Case, Layer };
// Storage class: float (float32 written; float64/16, bfloat16 read), gap (float64, NaN = none),
// index (int32; int64 read), flag (uint8 0/1).
enum class Storage : uint8_t { Float, Gap, Index, Flag };
// Tolerance class (bounds per precision: fixtures/tolerances.cpp, docs/TOLERANCES.md).
enum class TolClass : uint8_t { Activation, Logits, Scores, RouterWeights, IndexSet, ExactIds, Info };
// Attribution (fixtures/attribution.h): which row state decides whether a layer dataset's row is still
// comparable after a decision differed upstream.
enum class Taint : uint8_t {
  None,           // not masked (info datasets, case-level datasets other than the head's)
  LayerInput,     // rows dirty at the layer's input (dirty_in)
  CacheRow,       // cache rows (latent, indexer key) of dirty positions (key_dirty)
  ScoresEntry,    // per element [t, s]: query row t dirty or key s dirty
  AfterAttention, // attention differs (attn)
  RouterWeights,  // ffn rows; with forced decisions the expected ids' weights: attn rows
  AfterFfn,       // experts differ (ffn)
  Decision,       // a decision itself (judged by attribution's counts, not masked)
  ModelOutput,    // final_norm, logits: rows dirty after the last layer
};
// The plot's panels, in the order they are drawn (fixtures/png_plot.cpp); None: not plotted.
// LayerIo stays last (png_plot.cpp draws None + 1 .. LayerIo).
enum class Panel : uint8_t { None, QPath, KvPath, Indexer, Attention, Router, Experts, LayerIo };

struct OpRow {
  const char* name;      // canonical dataset name = the op's name where it is an op's output
  DatasetLevel level;
  Storage storage;
  TolClass cls;
  const char* shape;     // symbolic axes, comma separated (fixtures/SCHEMA.md "Datasets" has the symbols)
  int row_axis;          // which axis holds rows (tokens T, cache rows S, greedy steps n); -1: none
  LayerKind kind;        // the layers that hold it
  Taint taint;
  Panel panel;
  bool oracle;           // the Hugging Face oracle (tools/hf_oracle) holds it
  const char* meaning;   // one line: fixtures/SCHEMA.md's table
  // Op replay (`mlaconf answer`, Backend::replay): the datasets the op reads, space separated ("": not
  // an op replay answers). moe_inputs: what it reads on MoE layers instead ("": the same). computed_by:
  // the op whose replay writes this dataset too (indexer_topk writes its gap and tie flags).
  const char* replay_inputs;
  const char* replay_moe_inputs;
  const char* computed_by;
  // Pointers, space separated where several ("": none yet).
  const char* hf;         // the Hugging Face module / oracle output it corresponds to
  const char* llama_cpp;  // llama.cpp graph node name(s) (tools/llama_cpp/tensor_map.cpp)
  const char* reference;  // reference/ function(s) that compute it (ref::name)
  const char* cuda;       // the CUDA pipeline's op (optimized/: Pipeline::Impl method or cu:: kernel)
  const char* tests;      // <suites dir>/<case or test name prefix> that cover it
};

// Every dataset, case level first (model-level order of a pass and a generation), then the layer
// datasets in forward order: "the first op that diverged" is the first in this order.
std::span<const OpRow> op_registry();
// The row named `name` (a base name: "attn_out", "step_logits") at `level`, or nullptr.
const OpRow* find_op(std::string_view name, DatasetLevel level);
// The row of a base name at either level (layer first), or nullptr.
const OpRow* find_op(std::string_view name);
// The first row named `name` in `rows` (for derivations run on a registry of a test's own).
const OpRow* find_op_in(std::span<const OpRow> rows, std::string_view name);

const char* storage_name(Storage s);   // float | gap | index | flag
const char* panel_title(Panel p);      // "Q PATH", ...; "" for None

// ---- views derived from rows (core/op_registry_views.cpp) ---------------------------------------------
// Each takes the rows so that a test can show that a row of its own flows through (the callers pass
// op_registry()).

// The names of one of a row's list fields (replay inputs, reference functions, tests, ...): space separated.
std::vector<std::string> row_list(const char* field);
// The symbols of a row's shape, comma separated: "T,H,D" -> T H D.
std::vector<std::string> shape_symbols(const char* shape);

// Position in a pass: layer datasets 0, 1, ... in row order, then case-level ones from 1000; unknown: 2000.
int forward_rank_in(std::span<const OpRow> rows, std::string_view name);
// A plot panel's layer datasets, in forward order.
std::vector<const char*> panel_ops(std::span<const OpRow> rows, Panel p);

// One op of the replay (`mlaconf answer`, Backend::replay): what it reads and writes, on which layers.
struct ReplayOp {
  std::string op;                    // the op's name = its first output
  std::vector<std::string> inputs;   // datasets it reads (all required)
  std::vector<std::string> outputs;  // datasets it writes (its own, then those computed_by it)
  LayerKind kind = LayerKind::Any;   // Dense / Moe where the op reads other inputs on MoE layers
};
std::vector<ReplayOp> replay_ops_from(std::span<const OpRow> rows);
const std::vector<ReplayOp>& replay_ops();  // of op_registry(), in forward order

}  // namespace mlaconf
