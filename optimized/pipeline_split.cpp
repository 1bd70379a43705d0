// mlaconf optimized: the layer split over devices: the stages' plan, the weights on their
// stage's device, the hand-off of the hidden state and of the top-k lists between stages.
#include "optimized/pipeline_impl.h"

namespace mlaconf::cuda {

int Pipeline::Impl::stage_of(const TensorSpec& s) const {
  if (s.layer >= 0) return layer_stage[(size_t)s.layer];
  return s.name == wname::kTokenEmbd ? 0 : (int)stage_dev.size() - 1;
}

void Pipeline::Impl::plan_split() {
  stage_dev = opt.devices.empty() ? std::vector<int>{current_device()} : opt.devices;
  for (int d : stage_dev) {
    if (d < 0 || d >= device_count())
      throw InputError("--devices: CUDA device " + std::to_string(d) + " does not exist (" +
                       std::to_string(device_count()) + " here)");
  }
  const int64_t nl = c.n_layer_run();
  if ((int64_t)stage_dev.size() > nl)
    throw InputError("--devices: " + std::to_string(stage_dev.size()) + " devices for " + std::to_string(nl) +
                     " layers (at most one device per layer)");
  MemoryPlanRequest r;
  r.n_devices = (int)stage_dev.size();
  r.context = ctx;
  r.pass_arena_per_device = (uint64_t)std::max<int64_t>(opt.pass_arena_bytes, 0);
  MemoryPlan p = plan_memory(f, c, r);
  layer_stage.assign((size_t)nl, 0);
  for (const DevicePlan& d : p.devices) {
    stage_layers.emplace_back(d.layer_begin, d.layer_end);
    for (int64_t l = d.layer_begin; l < d.layer_end; ++l) layer_stage[(size_t)l] = d.index;
  }
  enable_peer_access(stage_dev);
  for (int sdev : stage_dev) {
    DeviceScope on(sdev);
    deq_scratch.emplace_back();
    uploads.emplace_back();
  }
}

void Pipeline::Impl::enter_stage(int s, DeviceBuffer& h, int64_t n, std::vector<DeviceBuffer>& topk, std::vector<DeviceBuffer>& retired) {
  if (s == cur) return;
  set_device(stage_dev[(size_t)s]);
  DeviceBuffer moved = tbuf((size_t)n * 4);
  if (active_fault() != Fault::SplitNoHandoff)
    copy_peer(moved.get(), stage_dev[(size_t)s], h.get(), stage_dev[(size_t)cur], (size_t)n * 4);
  retired.push_back(std::move(h));
  h = std::move(moved);
  for (int64_t l = stage_layers[(size_t)s].first; l < stage_layers[(size_t)s].second; ++l) {
    const bool full = c.is_full_indexer_layer(l);
    const int64_t src = full ? l : c.indexer_source_layer(l);
    if (src < 0 || src >= l || !topk[(size_t)src].get() || topk_at[(size_t)src] == s) continue;
    DeviceBuffer t = tbuf(topk[(size_t)src].bytes());
    copy_peer(t.get(), stage_dev[(size_t)s], topk[(size_t)src].get(), stage_dev[(size_t)topk_at[(size_t)src]], t.bytes());
    retired.push_back(std::move(topk[(size_t)src]));
    topk[(size_t)src] = std::move(t);
    topk_at[(size_t)src] = s;
  }
  cur = s;
}

void Pipeline::Impl::upload_weights() {
  for (const TensorSpec& s : model_tensor_specs(c)) {
    DeviceScope on(stage_dev[(size_t)stage_of(s)]);
    const TensorInfo& ti = f.tensor(s.name);
    DevTensor t;
    t.type = ti.type;
    t.ne0 = ti.ne[0];
    t.ne1 = ti.ne[1];
    t.ne2 = ti.ne[2];
    t.row_bytes = row_bytes(ti.type, ti.ne[0]);
    if (!can_dequantize(ti.type))
      throw InputError(f.path() + ": tensor " + s.name + " has type " + type_name(ti.type) + ", which the CUDA pipeline cannot read");
    t.buf = DeviceBuffer(ti.nbytes);
    t.buf.upload(ti.data, ti.nbytes);
    if (ti.type == GgmlType::F32 && ti.n_dims == 1) {
      t.host_f32.resize(ti.ne[0]);
      std::memcpy(t.host_f32.data(), ti.data, ti.ne[0] * 4);
    }
    w.emplace(s.name, std::move(t));
  }
}

}  // namespace mlaconf::cuda
