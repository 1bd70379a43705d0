// suites/reference: a minimal read-only view of an HDF5 file through the C API (the oracle and the
// fixtures are plain datasets: float32/64, int32, uint8, plus string attributes).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mlaconf::test {

class H5File {
 public:
  explicit H5File(const std::string& path) : path_(path) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become exceptions below, not stderr noise
    id_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (id_ < 0) throw std::runtime_error(path + ": cannot open as HDF5");
  }
  ~H5File() {
    if (id_ >= 0) H5Fclose(id_);
  }
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;

  // Whether every component of an absolute path exists.
  bool exists(const std::string& p) const {
    size_t pos = 1;
    while (true) {
      size_t next = p.find('/', pos);
      std::string part = p.substr(0, next);
      if (H5Lexists(id_, part.c_str(), H5P_DEFAULT) <= 0) return false;
      if (next == std::string::npos) return true;
      pos = next + 1;
    }
  }

  std::vector<int64_t> shape(const std::string& p) const {
    hid_t d = open(p);
    hid_t s = H5Dget_space(d);
    int nd = H5Sget_simple_extent_ndims(s);
    std::vector<hsize_t> dims(static_cast<size_t>(nd));
    H5Sget_simple_extent_dims(s, dims.data(), nullptr);
    H5Sclose(s);
    H5Dclose(d);
    return std::vector<int64_t>(dims.begin(), dims.end());
  }

  // The dataset converted to double (float32/64/ints) or int32 (ints, uint8).
  std::vector<double> read_f64(const std::string& p, std::vector<int64_t>* shp = nullptr) const {
    return read<double>(p, H5T_NATIVE_DOUBLE, shp);
  }
  std::vector<int32_t> read_i32(const std::string& p, std::vector<int64_t>* shp = nullptr) const {
    return read<int32_t>(p, H5T_NATIVE_INT32, shp);
  }

  // A string attribute of an object (fixed or variable length).
  std::string attr_string(const std::string& obj, const std::string& name) const {
    hid_t a = H5Aopen_by_name(id_, obj.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) throw std::runtime_error(path_ + ": no attribute " + obj + "@" + name);
    hid_t t = H5Aget_type(a);
    std::string out;
    if (H5Tis_variable_str(t) > 0) {
      char* s = nullptr;
      hid_t mt = H5Tcopy(H5T_C_S1);
      H5Tset_size(mt, H5T_VARIABLE);
      H5Aread(a, mt, &s);
      if (s) out = s;
      H5free_memory(s);
      H5Tclose(mt);
    } else {
      size_t n = H5Tget_size(t);
      std::vector<char> buf(n + 1, 0);
      H5Aread(a, t, buf.data());
      out = buf.data();
    }
    H5Tclose(t);
    H5Aclose(a);
    return out;
  }

 private:
  hid_t open(const std::string& p) const {
    hid_t d = H5Dopen2(id_, p.c_str(), H5P_DEFAULT);
    if (d < 0) throw std::runtime_error(path_ + ": no dataset " + p);
    return d;
  }
  template <class T>
  std::vector<T> read(const std::string& p, hid_t mem_type, std::vector<int64_t>* shp) const {
    std::vector<int64_t> s = shape(p);
    if (shp) *shp = s;
    size_t n = 1;
    for (int64_t v : s) n *= static_cast<size_t>(v);
    std::vector<T> out(n);
    hid_t d = open(p);
    herr_t rc = H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
    H5Dclose(d);
    if (rc < 0) throw std::runtime_error(path_ + ": cannot read " + p);
    return out;
  }
  std::string path_;
  hid_t id_ = -1;
};

}  // namespace mlaconf::test
