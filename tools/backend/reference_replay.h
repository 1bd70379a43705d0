// mlaconf tools/backend: op replay on the Eigen reference (op_table.h's ops, reference/ functions).
#pragma once
#include <memory>
#include <string>

#include "core/gguf.h"
#include "core/model_config.h"
#include "tools/backend/backend.h"

namespace mlaconf::be {

template <class S>
class ReferenceReplay {
 public:
  // `dense_attention`: the negative control of ModelOptions, in replay: attn_latent_out attends to every
  // causal row instead of the indexer_topk it is given.
  ReferenceReplay(const GgufFile& f, const ModelConfig& c, bool dense_attention = false);
  ~ReferenceReplay();
  // One op of `layer` on exact inputs (see Backend::replay).
  Tensors run(int layer, const std::string& op, const Tensors& in, int64_t pos0);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

extern template class ReferenceReplay<float>;
extern template class ReferenceReplay<double>;

}  // namespace mlaconf::be
