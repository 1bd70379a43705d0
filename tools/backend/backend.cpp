// mlaconf tools/backend: the factory and the defaults of the Backend interface (backend.h).
#include "tools/backend/backend.h"

#include "core/error.h"

namespace mlaconf::be {

std::unique_ptr<Backend> make_reference_backend(const GgufFile& f, const ModelConfig& c, const BackendOptions& o);
std::unique_ptr<Backend> make_cuda_backend(const GgufFile& f, const ModelConfig& c, const BackendOptions& o);

void Backend::set_range(const LayerRange& r) {
  if (r.l_begin != 0 || r.l_end >= 0 || !r.head)
    throw NotSupported(name() + " backend: runs whole forward passes only (no layer range, no synthetic layer input)");
}

std::unique_ptr<Backend> make_backend(const std::string& name, const GgufFile& f, const ModelConfig& c,
                                      const BackendOptions& o) {
  if (name == "reference") return make_reference_backend(f, c, o);
  if (name == "cuda") return make_cuda_backend(f, c, o);
  throw InputError("backend must be reference or cuda, not '" + name + "'");
}

}  // namespace mlaconf::be
