#include "core/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include "core/error.h"

namespace mlaconf {

// ---------------------------------------------------------------------------------------------------
// A read-only mapping of a whole file. Tensor bytes are paged in lazily by the kernel.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    // O_NONBLOCK: opening a FIFO without a writer must not hang (it is refused just below).
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) throw InputError(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (fstat(fd_, &st) != 0) throw InputError(path + ": cannot stat: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw InputError(path + ": not a regular file");
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ > 0) {
      void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
      if (p == MAP_FAILED) throw InputError(path + ": cannot mmap: " + std::strerror(errno));
      base_ = static_cast<const uint8_t*>(p);
    }
  }
  ~MappedFile() {
    if (base_) munmap(const_cast<uint8_t*>(base_), size_);
    if (fd_ >= 0) ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return base_; }
  uint64_t size() const { return size_; }

 private:
  std::string path_;
  int fd_ = -1;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
};

namespace {

// Sequential little-endian reader over the header bytes, bounds-checked on every read.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* p, uint64_t n) : path_(path), p_(p), n_(n) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return n_ - pos_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(path_ + ": " + what + " (at byte " + std::to_string(pos_) + ")");
  }
  void need(uint64_t k, const char* what) const {
    if (k > left())
      fail(std::string("truncated file: ") + what + " needs " + std::to_string(k) + " bytes, " +
           std::to_string(left()) + " left");
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    uint64_t len = read<uint64_t>(what);
    if (len > left())
      fail(std::string("absurd string length ") + std::to_string(len) + " for " + what + " (only " +
           std::to_string(left()) + " bytes left)");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  std::string path_;
  const uint8_t* p_;
  uint64_t n_;
  uint64_t pos_ = 0;
};

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
    default: return 0;
  }
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::FLOAT64); }

// Reads one scalar of an integer or bool type, widened to int64.
int64_t read_int(Cursor& c, GgufType t, const std::string& key) {
  switch (t) {
    case GgufType::UINT8: return c.read<uint8_t>("u8 value");
    case GgufType::INT8: return c.read<int8_t>("i8 value");
    case GgufType::UINT16: return c.read<uint16_t>("u16 value");
    case GgufType::INT16: return c.read<int16_t>("i16 value");
    case GgufType::UINT32: return c.read<uint32_t>("u32 value");
    case GgufType::INT32: return c.read<int32_t>("i32 value");
    case GgufType::INT64: return c.read<int64_t>("i64 value");
    case GgufType::UINT64: {
      uint64_t v = c.read<uint64_t>("u64 value");
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        c.fail("u64 value of key '" + key + "' is larger than 2^63");
      return static_cast<int64_t>(v);
    }
    case GgufType::BOOL: {
      uint8_t b = c.read<uint8_t>("bool value");
      if (b > 1) c.fail("bool value " + std::to_string(b) + " of key '" + key + "' is neither 0 nor 1");
      return b;
    }
    default: c.fail("internal: not an integer type");
  }
}

double read_float(Cursor& c, GgufType t) {
  if (t == GgufType::FLOAT32) return c.read<float>("f32 value");
  return c.read<double>("f64 value");
}

GgufValue read_value(Cursor& c, GgufType t, const std::string& key) {
  GgufValue v;
  v.type = t;
  if (gguf_type_is_integer(t) || t == GgufType::BOOL) {
    v.i = read_int(c, t, key);
  } else if (gguf_type_is_float(t)) {
    v.f = read_float(c, t);
  } else if (t == GgufType::STRING) {
    v.s = c.read_string("string value");
  } else if (t == GgufType::ARRAY) {
    uint32_t et = c.read<uint32_t>("array element type");
    if (!valid_value_type(et)) c.fail("unknown array element type " + std::to_string(et) + " in key '" + key + "'");
    v.elem_type = static_cast<GgufType>(et);
    if (v.elem_type == GgufType::ARRAY) c.fail("nested array in key '" + key + "'");
    uint64_t n = c.read<uint64_t>("array length");
    // Every element takes at least one byte (a string at least 8): reject counts the file cannot hold.
    uint64_t min_elem = v.elem_type == GgufType::STRING ? 8 : scalar_size(v.elem_type);
    if (n > c.left() / min_elem)
      c.fail("absurd array length " + std::to_string(n) + " in key '" + key + "'");
    if (v.elem_type == GgufType::STRING) {
      v.strings.reserve(n);
      for (uint64_t k = 0; k < n; ++k) v.strings.push_back(c.read_string("array string"));
    } else if (gguf_type_is_float(v.elem_type)) {
      v.floats.reserve(n);
      for (uint64_t k = 0; k < n; ++k) v.floats.push_back(read_float(c, v.elem_type));
    } else {
      v.ints.reserve(n);
      for (uint64_t k = 0; k < n; ++k) v.ints.push_back(read_int(c, v.elem_type, key));
    }
  } else {
    c.fail("unknown metadata value type " + std::to_string(static_cast<uint32_t>(t)) + " in key '" + key + "'");
  }
  return v;
}

struct ParsedShard {
  GgufShard info;
  std::vector<std::pair<std::string, GgufValue>> kv;
  std::vector<TensorInfo> tensors;
};

ParsedShard parse_shard(const std::string& path, const MappedFile& map, int shard_no) {
  ParsedShard out;
  out.info.path = path;
  out.info.file_size = map.size();
  Cursor c(path, map.data(), map.size());

  uint32_t magic = c.read<uint32_t>("magic");
  if (magic != 0x46554747u) {  // "GGUF"
    char m[5] = {0};
    std::memcpy(m, &magic, 4);
    for (char& ch : m)
      if (ch && !std::isprint(static_cast<unsigned char>(ch))) ch = '?';
    throw InputError(path + ": not a GGUF file (bad magic '" + std::string(m) + "')");
  }
  uint32_t version = c.read<uint32_t>("version");
  if ((version & 0xFFFFu) == 0 && version != 0)
    throw InputError(path + ": GGUF written big-endian (version field " + std::to_string(version) +
                     "); only little-endian files are supported");
  if (version != 2 && version != 3)
    throw InputError(path + ": unsupported GGUF version " + std::to_string(version) + " (supported: 2, 3)");
  out.info.version = version;
  uint64_t n_tensors = c.read<uint64_t>("tensor count");
  uint64_t n_kv = c.read<uint64_t>("metadata count");
  // A KV pair needs at least 8 (key length) + 4 (type) + 1 bytes, a tensor info at least 8 + 4 + 8 + 4 + 8.
  // A count the rest of the file cannot hold: truncated after the header, or a damaged count.
  auto too_many = [&](const char* what, uint64_t n, uint64_t min_bytes) {
    c.fail("truncated file or absurd " + std::string(what) + " " + std::to_string(n) + ": needs at least " +
           (n > UINT64_MAX / min_bytes ? std::string("2^64") : std::to_string(n * min_bytes)) + " bytes, " +
           std::to_string(c.left()) + " left");
  };
  if (n_kv > c.left() / 13) too_many("metadata count", n_kv, 13);
  if (n_tensors > c.left() / 32) too_many("tensor count", n_tensors, 32);
  out.info.n_tensors = n_tensors;
  out.info.n_kv = n_kv;

  std::set<std::string> keys;
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.read_string("metadata key");
    uint32_t t = c.read<uint32_t>("metadata value type");
    if (!valid_value_type(t)) c.fail("unknown metadata value type " + std::to_string(t) + " for key '" + key + "'");
    if (!keys.insert(key).second) c.fail("duplicate metadata key '" + key + "'");
    out.kv.emplace_back(key, read_value(c, static_cast<GgufType>(t), key));
  }

  uint64_t alignment = 32;
  for (const auto& [key, v] : out.kv) {
    if (key == "general.alignment") {
      if (v.type != GgufType::UINT32) throw InputError(path + ": general.alignment must be u32");
      if (v.i == 0 || (v.i & (v.i - 1)) != 0)
        throw InputError(path + ": general.alignment " + std::to_string(v.i) + " is not a power of two");
      alignment = static_cast<uint64_t>(v.i);
    }
  }
  out.info.alignment = alignment;

  std::set<std::string> names;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorInfo ti;
    ti.shard = shard_no;
    ti.name = c.read_string("tensor name");
    if (ti.name.size() >= 64) c.fail("tensor name '" + ti.name.substr(0, 80) + "' is longer than 63 bytes");
    if (!names.insert(ti.name).second) c.fail("duplicate tensor name '" + ti.name + "'");
    uint32_t n_dims = c.read<uint32_t>("tensor n_dims");
    if (n_dims == 0 || n_dims > 4)
      c.fail("tensor '" + ti.name + "' has " + std::to_string(n_dims) + " dimensions (1..4 allowed)");
    ti.n_dims = static_cast<int>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      int64_t ne = c.read<int64_t>("tensor dimension");
      if (ne < 0) c.fail("tensor '" + ti.name + "' has negative dimension " + std::to_string(ne));
      ti.ne[d] = ne;
    }
    // The element count must fit in int64 (ggml checks the same). Zero dimensions are skipped, so that
    // {0, 2^40, 2^40} is refused too: n_rows() of it would overflow although n_elements() is 0.
    int64_t prod = 1;
    for (int d = 0; d < 4; ++d) {
      if (ti.ne[d] == 0) continue;
      if (prod > std::numeric_limits<int64_t>::max() / ti.ne[d])
        c.fail("tensor '" + ti.name + "' has a dimension product that overflows 64 bits");
      prod *= ti.ne[d];
    }
    uint32_t type_id = c.read<uint32_t>("tensor type");
    const TypeTraits* tt = find_type(type_id);
    if (!tt) c.fail("tensor '" + ti.name + "' has unknown ggml type id " + std::to_string(type_id));
    ti.type = tt->type;
    if (ti.ne[0] % tt->block_size != 0)
      c.fail("tensor '" + ti.name + "': ne0 = " + std::to_string(ti.ne[0]) + " is not a multiple of the " +
             tt->name + " block size " + std::to_string(tt->block_size));
    // nbytes = rows * row_bytes, checked for overflow.
    uint64_t rb = static_cast<uint64_t>(ti.ne[0] / tt->block_size) * static_cast<uint64_t>(tt->type_size);
    uint64_t rows = static_cast<uint64_t>(ti.ne[1]) * static_cast<uint64_t>(ti.ne[2]) * static_cast<uint64_t>(ti.ne[3]);
    if (rb != 0 && rows > std::numeric_limits<uint64_t>::max() / 2 / rb)
      c.fail("tensor '" + ti.name + "' byte size overflows 64 bits");
    ti.nbytes = rb * rows;
    ti.offset = c.read<uint64_t>("tensor offset");
    if (ti.offset % alignment != 0)
      c.fail("tensor '" + ti.name + "' offset " + std::to_string(ti.offset) + " is not aligned to " +
             std::to_string(alignment));
    out.tensors.push_back(std::move(ti));
  }

  uint64_t data_offset = (c.pos() + alignment - 1) / alignment * alignment;
  if (data_offset > map.size() && n_tensors > 0)
    throw InputError(path + ": truncated file: data section would start at byte " + std::to_string(data_offset) +
                     " but the file has " + std::to_string(map.size()) + " bytes");
  out.info.data_offset = data_offset;
  uint64_t data_size = map.size() > data_offset ? map.size() - data_offset : 0;

  // Bounds and overlap, in offset order.
  std::vector<const TensorInfo*> by_off;
  for (const auto& t : out.tensors) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](auto a, auto b) { return a->offset < b->offset; });
  uint64_t end_prev = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : by_off) {
    if (t->offset > data_size || t->nbytes > data_size - t->offset)
      throw InputError(path + ": tensor '" + t->name + "' data [" + std::to_string(t->offset) + ", +" +
                       std::to_string(t->nbytes) + ") runs past the end of the file (data section holds " +
                       std::to_string(data_size) + " bytes; truncated file?)");
    if (prev && t->offset < end_prev && t->nbytes > 0)
      throw InputError(path + ": tensors '" + prev->name + "' and '" + t->name + "' overlap in the data section");
    if (t->nbytes > 0) {
      end_prev = t->offset + t->nbytes;
      prev = t;
    }
  }
  for (auto& t : out.tensors) t.data = map.data() + data_offset + t.offset;
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
const char* gguf_type_name(GgufType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                "string", "array", "u64", "i64", "f64"};
  auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "?";
}
bool gguf_type_is_integer(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
    case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64:
      return true;
    default: return false;
  }
}
bool gguf_type_is_float(GgufType t) { return t == GgufType::FLOAT32 || t == GgufType::FLOAT64; }

std::string GgufValue::to_string(size_t max_items) const {
  std::ostringstream os;
  os.precision(9);
  if (type == GgufType::STRING) return "\"" + s + "\"";
  if (type == GgufType::BOOL) return i ? "true" : "false";
  if (gguf_type_is_integer(type)) return std::to_string(i);
  if (gguf_type_is_float(type)) { os << f; return os.str(); }
  // array
  size_t n = array_size();
  os << "[" << gguf_type_name(elem_type) << " x " << n << "]";
  if (n == 0) return os.str();
  os << " {";
  for (size_t k = 0; k < std::min(n, max_items); ++k) {
    if (k) os << ", ";
    if (!strings.empty()) os << "\"" << strings[k] << "\"";
    else if (!floats.empty()) os << floats[k];
    else if (elem_type == GgufType::BOOL) os << (ints[k] ? "true" : "false");
    else os << ints[k];
  }
  if (n > max_items) os << ", ...";
  os << "}";
  return os.str();
}

int64_t TensorInfo::row_bytes() const { return mlaconf::row_bytes(type, ne[0]); }

std::string TensorInfo::shape_string() const {
  std::string s = "{";
  for (int d = 0; d < n_dims; ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "}";
}

bool parse_split_name(const std::string& path, SplitName* out) {
  // ...-NNNNN-of-MMMMM.gguf
  const std::string suf = ".gguf";
  if (path.size() < suf.size() + 15 || path.compare(path.size() - suf.size(), suf.size(), suf) != 0) return false;
  std::string stem = path.substr(0, path.size() - suf.size());
  if (stem.size() < 15) return false;
  std::string tail = stem.substr(stem.size() - 15);  // "-00001-of-00005"
  auto digits = [](const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  };
  if (tail[0] != '-' || tail.substr(6, 4) != "-of-" || !digits(tail.substr(1, 5)) || !digits(tail.substr(10, 5)))
    return false;
  out->prefix = stem.substr(0, stem.size() - 15);
  out->no = std::stoi(tail.substr(1, 5));
  out->count = std::stoi(tail.substr(10, 5));
  return out->no >= 1 && out->count >= 1 && out->no <= out->count;
}

std::string make_split_name(const std::string& prefix, int no, int count) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", no, count);
  return prefix + buf;
}

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  std::vector<std::string> paths{path};
  SplitName sn;
  if (parse_split_name(path, &sn) && sn.count > 1) {
    paths.clear();
    for (int k = 1; k <= sn.count; ++k) paths.push_back(make_split_name(sn.prefix, k, sn.count));
  }
  for (size_t k = 0; k < paths.size(); ++k) {
    auto map = std::make_unique<MappedFile>(paths[k]);
    ParsedShard ps = parse_shard(paths[k], *map, static_cast<int>(k));
    if (k == 0) {
      f.kv_ = std::move(ps.kv);
      for (size_t i = 0; i < f.kv_.size(); ++i) f.kv_index_[f.kv_[i].first] = i;
    } else {
      // A shard names its place in the split; check it matches.
      for (const auto& [key, v] : ps.kv)
        if (key == "split.no" && v.i != static_cast<int64_t>(k))
          throw InputError(paths[k] + ": split.no is " + std::to_string(v.i) + ", expected " + std::to_string(k));
    }
    for (auto& t : ps.tensors) {
      if (f.tensor_index_.count(t.name))
        throw InputError(paths[k] + ": tensor '" + t.name + "' appears in more than one shard");
      f.tensor_index_[t.name] = f.tensors_.size();
      f.tensors_.push_back(std::move(t));
    }
    f.shards_.push_back(ps.info);
    f.maps_.push_back(std::move(map));
  }
  if (paths.size() > 1) {
    if (const GgufValue* n = f.find("split.tensors.count"))
      if (n->i != static_cast<int64_t>(f.tensors_.size()))
        throw InputError(path + ": split.tensors.count says " + std::to_string(n->i) + " tensors, shards hold " +
                         std::to_string(f.tensors_.size()));
  }
  return f;
}

uint64_t GgufFile::total_file_size() const {
  uint64_t s = 0;
  for (const auto& sh : shards_) s += sh.file_size;
  return s;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::require(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) throw InputError(path() + ": missing metadata key '" + key + "'");
  return *v;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = require(key);
  if (!gguf_type_is_integer(v.type))
    throw InputError(path() + ": metadata key '" + key + "' is " + gguf_type_name(v.type) + ", expected an integer");
  return v.i;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = require(key);
  if (gguf_type_is_float(v.type)) return v.f;
  if (gguf_type_is_integer(v.type)) return static_cast<double>(v.i);
  throw InputError(path() + ": metadata key '" + key + "' is " + gguf_type_name(v.type) + ", expected a number");
}

bool GgufFile::get_bool(const std::string& key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufType::BOOL)
    throw InputError(path() + ": metadata key '" + key + "' is " + gguf_type_name(v.type) + ", expected bool");
  return v.i != 0;
}

const std::string& GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = require(key);
  if (v.type != GgufType::STRING)
    throw InputError(path() + ": metadata key '" + key + "' is " + gguf_type_name(v.type) + ", expected string");
  return v.s;
}

const TensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& GgufFile::tensor(const std::string& name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) throw InputError(path() + ": missing tensor '" + name + "'");
  return *t;
}

}  // namespace mlaconf
