// mlaconf synth: a valid glm-dsa (or deepseek32) GGUF from a seed and a config.
//
// Tensor names and shapes come from core/weight_layout.h (model_tensor_specs), metadata keys are the
// ones llama.cpp writes (compare ../shared/models/glm-dsa-tiny.gguf), the tokenizer is
// tok::add_synthetic_tokenizer's. Tensor data is streamed to disk in bounded chunks (a full-size GLM-5
// layer never sits in memory), each file is written under a temporary name and renamed into place.
// Same options and seed -> identical bytes.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ggml_types.h"
#include "core/model_config.h"
#include "core/weight_layout.h"
#include "synth/block_fill.h"

namespace mlaconf::synth {

struct Options {
  ModelConfig config = ModelConfig::tiny_default();
  uint64_t seed = 0;
  // Type of every quantizable tensor (not norms / router / biases); unset = the tiny model's mix.
  bool has_type_default = false;
  GgmlType type_default = GgmlType::Q4_K;
  // Substring of the tensor name -> type; applied in order after the default (the last match wins).
  std::vector<std::pair<std::string, GgmlType>> type_overrides;
  int split = 1;             // number of shards (1 = one file; at most 1000), written all or none
  bool header_only = false;  // header and offsets exact; data region left as a sparse hole
  uint64_t alignment = 32;
  std::string name = "mlaconf-synth";
};

// "tiny" (ModelConfig::tiny_default) or "glm5" (GLM-5's real dims, ../shared/docs/glm5-math.md §1).
// Throws InputError for another name.
ModelConfig preset(const std::string& name);

// The tiny model's type mix (../shared/README.md "types"), by tensor role and layer.
GgmlType mix_type(const TensorSpec& s, const ModelConfig& c);
// llama.cpp's fallback for a row length the block size does not divide (Q4_K -> Q5_0, Q5_K -> Q5_1,
// Q6_K -> Q8_0, other 256-blocks -> IQ4_NL, then F16 when 32 does not divide either).
GgmlType fallback_type(GgmlType t, int64_t ne0);

// The value distribution a tensor's weights are drawn from (linear N(0, 1/fan_in), embeddings N(0, 1),
// norms 1 +- 0.2, indexer k_norm bias +- 0.1, exp_probs_b +- 0.05, lm_head N(0, 4/hidden)).
ValueDist value_dist(const TensorSpec& s, const ModelConfig& c);

struct PlannedTensor {
  TensorSpec spec;
  GgmlType type = GgmlType::F32;
  uint64_t nbytes = 0;
  int shard = 0;
};
// Every tensor the file(s) will hold, with its final type and shard.
std::vector<PlannedTensor> plan(const Options& o);

// The files write_model writes: `out` ("F.gguf"), or with split > 1 the shards "F-0000k-of-0000N.gguf".
// For checking every one of them before the work (a directory or a special file planted at shard 2 was
// found only at its rename, after shard 1 had replaced, then removed, the file of that name).
std::vector<std::string> output_paths(const Options& o, const std::string& out);

// Writes the model to output_paths(o, out).
// Returns the paths written. Throws InputError on a bad config or an I/O failure.
std::vector<std::string> write_model(const Options& o, const std::string& out);

}  // namespace mlaconf::synth
