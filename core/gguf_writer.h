// mlaconf: GGUF v3 writer (little-endian), the layout llama.cpp's gguf-py writes: header, KV pairs,
// tensor infos, padding to general.alignment, tensors densely packed in info order, each padded.
//
// Files are written through core/atomic_file.h (temporary name, fsync, rename; removed on failure or
// interrupt), so no half-written GGUF is ever left under any name.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/atomic_file.h"  // write_file_atomic: every writer's one way to write a file
#include "core/gguf.h"

namespace mlaconf {

class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}

  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_array_string(const std::string& key, const std::vector<std::string>& v);
  void set_array_i32(const std::string& key, const std::vector<int32_t>& v);
  void set_array_f32(const std::string& key, const std::vector<float>& v);
  void set_array_bool(const std::string& key, const std::vector<bool>& v);
  // A value copied from another file (used to carry a tokenizer across).
  void set_value(const std::string& key, const GgufValue& v);

  // Adds a tensor; `data` must hold exactly row_bytes(type, ne[0]) * rows bytes.
  void add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne, std::vector<uint8_t> data);

  // Streaming: declares a tensor whose bytes the caller writes itself after header_bytes(), in
  // declaration order, each padded with zeros to alignment() (see synth/ for a user). bytes() and
  // write() refuse a writer that holds such a tensor.
  void add_tensor_info(const std::string& name, GgmlType type, const std::vector<int64_t>& ne);
  // Header, metadata and tensor infos, zero-padded to the alignment: everything before the data section.
  std::vector<uint8_t> header_bytes() const;
  uint64_t alignment() const { return alignment_; }

  // The serialized file.
  std::vector<uint8_t> bytes() const;
  // Writes atomically (temporary name, then rename). Throws InputError on I/O failure.
  void write(const std::string& path) const;

 private:
  struct Kv {
    std::string key;
    std::vector<uint8_t> encoded;  // type id + value, already encoded
  };
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
    uint64_t nbytes = 0;    // data.size(), or the declared size of a streamed tensor
    bool streamed = false;  // added by add_tensor_info: no data held here
  };
  void put_kv(const std::string& key, std::vector<uint8_t> enc);
  uint64_t alignment_;
  std::vector<Kv> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace mlaconf
