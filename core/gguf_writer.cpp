#include "core/gguf_writer.h"

#include <cstring>

#include "core/error.h"

namespace mlaconf {
namespace {

template <class T>
void put(std::vector<uint8_t>& b, T v) {
  uint8_t tmp[sizeof(T)];
  std::memcpy(tmp, &v, sizeof(T));
  b.insert(b.end(), tmp, tmp + sizeof(T));
}
void put_str(std::vector<uint8_t>& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
std::vector<uint8_t> typed(GgufType t) {
  std::vector<uint8_t> b;
  put<uint32_t>(b, static_cast<uint32_t>(t));
  return b;
}
std::vector<uint8_t> array_head(GgufType et, uint64_t n) {
  std::vector<uint8_t> b = typed(GgufType::ARRAY);
  put<uint32_t>(b, static_cast<uint32_t>(et));
  put<uint64_t>(b, n);
  return b;
}

}  // namespace

void GgufWriter::put_kv(const std::string& key, std::vector<uint8_t> enc) {
  for (auto& kv : kv_)
    if (kv.key == key) {
      kv.encoded = std::move(enc);
      return;
    }
  kv_.push_back({key, std::move(enc)});
}

void GgufWriter::set_u32(const std::string& k, uint32_t v) { auto b = typed(GgufType::UINT32); put(b, v); put_kv(k, b); }
void GgufWriter::set_i32(const std::string& k, int32_t v) { auto b = typed(GgufType::INT32); put(b, v); put_kv(k, b); }
void GgufWriter::set_u64(const std::string& k, uint64_t v) { auto b = typed(GgufType::UINT64); put(b, v); put_kv(k, b); }
void GgufWriter::set_f32(const std::string& k, float v) { auto b = typed(GgufType::FLOAT32); put(b, v); put_kv(k, b); }
void GgufWriter::set_bool(const std::string& k, bool v) { auto b = typed(GgufType::BOOL); put<uint8_t>(b, v ? 1 : 0); put_kv(k, b); }
void GgufWriter::set_string(const std::string& k, const std::string& v) { auto b = typed(GgufType::STRING); put_str(b, v); put_kv(k, b); }
void GgufWriter::set_array_string(const std::string& k, const std::vector<std::string>& v) {
  auto b = array_head(GgufType::STRING, v.size());
  for (const auto& s : v) put_str(b, s);
  put_kv(k, b);
}
void GgufWriter::set_array_i32(const std::string& k, const std::vector<int32_t>& v) {
  auto b = array_head(GgufType::INT32, v.size());
  for (int32_t x : v) put(b, x);
  put_kv(k, b);
}
void GgufWriter::set_array_f32(const std::string& k, const std::vector<float>& v) {
  auto b = array_head(GgufType::FLOAT32, v.size());
  for (float x : v) put(b, x);
  put_kv(k, b);
}
void GgufWriter::set_array_bool(const std::string& k, const std::vector<bool>& v) {
  auto b = array_head(GgufType::BOOL, v.size());
  for (bool x : v) put<uint8_t>(b, x ? 1 : 0);
  put_kv(k, b);
}

void GgufWriter::set_value(const std::string& k, const GgufValue& v) {
  auto scalar = [](std::vector<uint8_t>& b, GgufType t, int64_t i, double f) {
    switch (t) {
      case GgufType::UINT8: put<uint8_t>(b, static_cast<uint8_t>(i)); break;
      case GgufType::INT8: put<int8_t>(b, static_cast<int8_t>(i)); break;
      case GgufType::UINT16: put<uint16_t>(b, static_cast<uint16_t>(i)); break;
      case GgufType::INT16: put<int16_t>(b, static_cast<int16_t>(i)); break;
      case GgufType::UINT32: put<uint32_t>(b, static_cast<uint32_t>(i)); break;
      case GgufType::INT32: put<int32_t>(b, static_cast<int32_t>(i)); break;
      case GgufType::UINT64: put<uint64_t>(b, static_cast<uint64_t>(i)); break;
      case GgufType::INT64: put<int64_t>(b, i); break;
      case GgufType::BOOL: put<uint8_t>(b, i ? 1 : 0); break;
      case GgufType::FLOAT32: put<float>(b, static_cast<float>(f)); break;
      case GgufType::FLOAT64: put<double>(b, f); break;
      default: break;
    }
  };
  if (v.type == GgufType::STRING) return set_string(k, v.s);
  if (v.type != GgufType::ARRAY) {
    auto b = typed(v.type);
    scalar(b, v.type, v.i, v.f);
    return put_kv(k, b);
  }
  auto b = array_head(v.elem_type, v.array_size());
  for (const auto& s : v.strings) put_str(b, s);
  for (double f : v.floats) scalar(b, v.elem_type, 0, f);
  for (int64_t i : v.ints) scalar(b, v.elem_type, i, 0);
  put_kv(k, b);
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne,
                            std::vector<uint8_t> data) {
  add_tensor_info(name, type, ne);
  Tensor& t = tensors_.back();
  if (data.size() != t.nbytes) {
    const uint64_t want = t.nbytes;
    tensors_.pop_back();
    throw InputError("tensor '" + name + "': " + std::to_string(data.size()) + " bytes given, " + std::to_string(want) +
                     " expected");
  }
  t.data = std::move(data);
  t.streamed = false;
}

void GgufWriter::add_tensor_info(const std::string& name, GgmlType type, const std::vector<int64_t>& ne) {
  if (ne.empty() || ne.size() > 4) throw InputError("tensor '" + name + "': 1..4 dimensions required");
  int64_t rows = 1;
  for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
  const uint64_t want = static_cast<uint64_t>(row_bytes(type, ne[0])) * static_cast<uint64_t>(rows);
  Tensor t{name, type, ne, {}};
  t.nbytes = want;
  t.streamed = true;
  tensors_.push_back(std::move(t));
}

std::vector<uint8_t> GgufWriter::header_bytes() const {
  std::vector<uint8_t> b;
  put<uint32_t>(b, 0x46554747u);
  put<uint32_t>(b, 3);
  put<uint64_t>(b, tensors_.size());
  bool has_align = false;
  for (const auto& kv : kv_) has_align |= kv.key == "general.alignment";
  put<uint64_t>(b, kv_.size() + (has_align || alignment_ == 32 ? 0 : 1));
  for (const auto& kv : kv_) {
    put_str(b, kv.key);
    b.insert(b.end(), kv.encoded.begin(), kv.encoded.end());
  }
  if (!has_align && alignment_ != 32) {
    put_str(b, "general.alignment");
    put<uint32_t>(b, static_cast<uint32_t>(GgufType::UINT32));
    put<uint32_t>(b, static_cast<uint32_t>(alignment_));
  }
  auto pad = [&](uint64_t x) { return (x + alignment_ - 1) / alignment_ * alignment_; };
  uint64_t off = 0;
  for (const auto& t : tensors_) {
    put_str(b, t.name);
    put<uint32_t>(b, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) put<int64_t>(b, n);
    put<uint32_t>(b, static_cast<uint32_t>(t.type));
    put<uint64_t>(b, off);
    off = pad(off + t.nbytes);
  }
  b.resize(pad(b.size()), 0);
  return b;
}

std::vector<uint8_t> GgufWriter::bytes() const {
  auto pad = [&](uint64_t x) { return (x + alignment_ - 1) / alignment_ * alignment_; };
  for (const auto& t : tensors_)
    if (t.streamed) throw InputError("tensor '" + t.name + "' was declared for streaming; bytes() cannot serialize it");
  std::vector<uint8_t> b = header_bytes();
  for (const auto& t : tensors_) {
    b.insert(b.end(), t.data.begin(), t.data.end());
    b.resize(pad(b.size()), 0);
  }
  return b;
}

void GgufWriter::write(const std::string& path) const {
  std::vector<uint8_t> b = bytes();
  write_file_atomic(path, b.data(), b.size());
}

}  // namespace mlaconf
