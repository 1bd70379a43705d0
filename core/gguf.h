// mlaconf: GGUF v2/v3 reader (little-endian), memory-mapped, split-aware.
//
// Opening a file parses only the header, the metadata and the tensor-info table; tensor data is
// reached through the mapping and is paged in only when a caller touches it. A model split into
// `name-00001-of-0000N.gguf` shards opens as one model from any of its shards.
//
// Every defect of the input (truncation, bad magic, absurd counts, overlapping or out-of-file tensor
// data, unknown type ids, duplicate names, overflowing shapes) raises InputError with the file name
// and the problem; the reader never trusts a count before checking it against the bytes left.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/ggml_types.h"

namespace mlaconf {

// GGUF metadata value types (gguf.h `enum gguf_type`).
enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_type_name(GgufType t);
bool gguf_type_is_integer(GgufType t);
bool gguf_type_is_float(GgufType t);

// One metadata value. Scalars keep their exact type; arrays keep their element type, with integers
// (and bools) widened to int64, floats to double, strings as strings.
struct GgufValue {
  GgufType type = GgufType::UINT8;
  GgufType elem_type = GgufType::UINT8;  // arrays only
  int64_t i = 0;        // integer and bool scalars (UINT64 values above INT64_MAX are rejected)
  double f = 0;         // float scalars
  std::string s;        // string scalars
  std::vector<int64_t> ints;          // integer / bool arrays
  std::vector<double> floats;         // float arrays
  std::vector<std::string> strings;   // string arrays

  bool is_array() const { return type == GgufType::ARRAY; }
  size_t array_size() const { return ints.size() + floats.size() + strings.size(); }
  // A short human-readable rendering; long arrays are summarised.
  std::string to_string(size_t max_items = 8) const;
};

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[0] is the fastest-varying dimension
  uint64_t offset = 0;                    // relative to its shard's data section
  uint64_t nbytes = 0;
  int shard = 0;                          // index into GgufFile::shards()
  const uint8_t* data = nullptr;          // into the shard's mapping; not read until used

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  int64_t row_bytes() const;  // bytes of one ne[0] row
  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(nbytes)}; }
  std::string shape_string() const;  // "{512, 256, 4}"
};

struct GgufShard {
  std::string path;
  uint64_t file_size = 0;
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // absolute offset of the data section in this file
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
};

class MappedFile;

class GgufFile {
 public:
  // Opens `path`; if it is one shard of a split model, every shard is opened.
  static GgufFile open(const std::string& path);
  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& path() const { return shards_.front().path; }
  const std::vector<GgufShard>& shards() const { return shards_; }
  uint32_t version() const { return shards_.front().version; }
  uint64_t total_file_size() const;

  // Metadata of the first shard (the only one that carries the model's keys), in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  // Typed getters: throw InputError naming the key and the file when it is missing or mistyped.
  const GgufValue& require(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // accepts integer values too
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;
  const TensorInfo& tensor(const std::string& name) const;  // throws InputError naming it

 private:
  GgufFile() = default;
  std::vector<GgufShard> shards_;
  std::vector<std::unique_ptr<MappedFile>> maps_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Split naming: "dir/name-00002-of-00005.gguf" -> {"dir/name", 2, 5}; nullopt if not split-named.
struct SplitName {
  std::string prefix;
  int no = 0;
  int count = 0;
};
bool parse_split_name(const std::string& path, SplitName* out);
std::string make_split_name(const std::string& prefix, int no, int count);

}  // namespace mlaconf
