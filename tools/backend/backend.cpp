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

namespace {
[[noreturn]] void no_batched_decode(const Backend& b) {
  throw NotSupported(b.name() + " backend: batched decode is not supported");
}
}  // namespace

int Backend::open_sequence() { no_batched_decode(*this); }
void Backend::close_sequence(int) { no_batched_decode(*this); }
void Backend::append_synthetic_context(int, int64_t, uint64_t) { no_batched_decode(*this); }
std::vector<double> Backend::prefill(int, std::span<const int32_t>) { no_batched_decode(*this); }
std::vector<int32_t> Backend::decode_step_greedy(std::span<const int>, std::span<const int32_t>) { no_batched_decode(*this); }
std::vector<std::vector<int32_t>> Backend::decode_steps_greedy(std::span<const int>, std::span<const int32_t>, int64_t) {
  no_batched_decode(*this);
}
int64_t Backend::graph_replays() const { return 0; }
DecodeSettings Backend::decode_settings() const { no_batched_decode(*this); }

std::unique_ptr<Backend> make_backend(const std::string& name, const GgufFile& f, const ModelConfig& c,
                                      const BackendOptions& o) {
  if (name == "reference") return make_reference_backend(f, c, o);
  if (name == "cuda") return make_cuda_backend(f, c, o);
  throw InputError("backend must be reference or cuda, not '" + name + "'");
}

}  // namespace mlaconf::be
