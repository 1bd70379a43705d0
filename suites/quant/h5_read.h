// suites/quant: a few read-only HDF5 C API helpers for the dequant tests (datasets, string attributes).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mlaconf::test {

// Owns one hid_t and closes it with the matching H5?close.
class H5Handle {
 public:
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  H5Handle(const H5Handle&) = delete;
  H5Handle(H5Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  H5Handle& operator=(const H5Handle&) = delete;
  ~H5Handle() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

inline H5Handle h5_open(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become return codes, reported by us
  H5Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.ok()) throw std::runtime_error(path + ": cannot open as HDF5");
  return f;
}

// Names of the groups directly under the root, in name order.
inline std::vector<std::string> h5_root_groups(hid_t file) {
  std::vector<std::string> names;
  H5G_info_t info;
  if (H5Gget_info(file, &info) < 0) return names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(file, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len <= 0) continue;
    std::string name(static_cast<size_t>(len) + 1, '\0');
    H5Lget_name_by_idx(file, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(static_cast<size_t>(len));
    H5Handle g(H5Gopen2(file, name.c_str(), H5P_DEFAULT), H5Gclose);  // fails for a dataset
    if (g.ok()) names.push_back(name);
  }
  return names;
}

// A dataset read whole into T (the HDF5 native type of T), with its dims.
template <typename T>
std::vector<T> h5_read(hid_t file, const std::string& path, std::vector<hsize_t>* dims_out = nullptr) {
  H5Handle ds(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) throw std::runtime_error("no dataset " + path);
  H5Handle sp(H5Dget_space(ds.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(sp.get());
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr);
  size_t n = 1;
  for (hsize_t d : dims) n *= d;
  std::vector<T> v(n);
  hid_t mem;
  if constexpr (std::is_same_v<T, float>) mem = H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, uint8_t>) mem = H5T_NATIVE_UINT8;
  else if constexpr (std::is_same_v<T, double>) mem = H5T_NATIVE_DOUBLE;
  else static_assert(sizeof(T) == 0, "unsupported element type");
  if (n && H5Dread(ds.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    throw std::runtime_error("cannot read dataset " + path);
  if (dims_out) *dims_out = dims;
  return v;
}

// A string attribute (fixed or variable length) of the object at obj_path ("/" for the file).
inline std::string h5_string_attr(hid_t file, const std::string& obj_path, const std::string& name) {
  H5Handle a(H5Aopen_by_name(file, obj_path.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.ok()) throw std::runtime_error("no attribute " + obj_path + "@" + name);
  H5Handle t(H5Aget_type(a.get()), H5Tclose);
  if (H5Tget_class(t.get()) != H5T_STRING) throw std::runtime_error("attribute " + name + " is not a string");
  if (H5Tis_variable_str(t.get()) > 0) {
    char* s = nullptr;
    H5Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt.get(), H5T_VARIABLE);
    H5Tset_cset(mt.get(), H5Tget_cset(t.get()));
    if (H5Aread(a.get(), mt.get(), &s) < 0) throw std::runtime_error("cannot read attribute " + name);
    std::string r = s ? s : "";
    H5free_memory(s);
    return r;
  }
  const size_t size = H5Tget_size(t.get());
  std::string r(size, '\0');
  if (H5Aread(a.get(), t.get(), r.data()) < 0) throw std::runtime_error("cannot read attribute " + name);
  while (!r.empty() && r.back() == '\0') r.pop_back();
  return r;
}

inline int64_t h5_int_attr(hid_t file, const std::string& obj_path, const std::string& name) {
  H5Handle a(H5Aopen_by_name(file, obj_path.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.ok()) throw std::runtime_error("no attribute " + obj_path + "@" + name);
  int64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0) throw std::runtime_error("cannot read attribute " + name);
  return v;
}

}  // namespace mlaconf::test
