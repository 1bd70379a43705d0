// Test helper: a raw little-endian GGUF byte builder. Unlike core's GgufWriter it writes whatever it is
// told (any version, counts that lie, offsets that overlap, unknown type ids), so tests can build both
// valid files of every flavour and each kind of damaged file from code.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

namespace mlaconf::testing_gguf {

struct Bytes {
  std::vector<uint8_t> b;

  template <class T>
  Bytes& put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& i64(int64_t v) { return put(v); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(const std::vector<uint8_t>& v) {
    b.insert(b.end(), v.begin(), v.end());
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
  Bytes& fill(size_t n, uint8_t seed) {
    for (size_t k = 0; k < n; ++k) b.push_back(static_cast<uint8_t>(seed + 37 * k));
    return *this;
  }
  Bytes& pad_to(uint64_t a) {
    while (b.size() % a) b.push_back(0);
    return *this;
  }
  // "GGUF", version, tensor count, kv count.
  Bytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv, uint32_t magic = 0x46554747u) {
    u32(magic).u32(version);
    if (version == 1) return u32(static_cast<uint32_t>(n_tensors)).u32(static_cast<uint32_t>(n_kv));
    return u64(n_tensors).u64(n_kv);
  }
  // key, value type 4 (u32), value.
  Bytes& kv_u32(const std::string& k, uint32_t v) { return str(k).u32(4).u32(v); }
  Bytes& kv_str(const std::string& k, const std::string& v) { return str(k).u32(8).str(v); }
  // name, n_dims, ne..., ggml type id, offset.
  Bytes& tinfo(const std::string& name, std::initializer_list<int64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (int64_t n : ne) i64(n);
    return u32(type).u64(offset);
  }
  size_t size() const { return b.size(); }
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A fresh scratch directory under $TMPDIR (or /tmp), unique per process and tag.
std::string scratch_dir(const std::string& tag);

}  // namespace mlaconf::testing_gguf
