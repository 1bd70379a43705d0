// mlaconf tools/backend: op replay on the Eigen reference (see reference_replay.h).
#include "tools/backend/reference_replay.h"

#include "core/error.h"

namespace mlaconf::be {

template <class S>
struct ReferenceReplay<S>::Impl {
  const GgufFile& f;
  ModelConfig c;
};

template <class S>
ReferenceReplay<S>::ReferenceReplay(const GgufFile& f, const ModelConfig& c) : impl_(new Impl{f, c}) {}
template <class S>
ReferenceReplay<S>::~ReferenceReplay() = default;

template <class S>
Tensors ReferenceReplay<S>::run(int layer, const std::string& op, const Tensors& in, int64_t pos0) {
  throw NotSupported("reference op replay of " + op + " is not implemented yet");
}

template class ReferenceReplay<float>;
template class ReferenceReplay<double>;

}  // namespace mlaconf::be
