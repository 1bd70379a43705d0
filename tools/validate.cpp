// mlaconf CLI: argument checks before work (see validate.h).
#include "tools/validate.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/fault_names.h"

namespace mlaconf::cli {
namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

void require_regular_file(const std::string& path, const std::string& option) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw InputError(option + " " + path + ": cannot open: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw InputError(option + " " + path + ": is " + kind_of(st.st_mode) + ", not a regular file");
  if (::access(path.c_str(), R_OK) != 0) throw InputError(option + " " + path + ": cannot read: " + std::strerror(errno));
}

void require_output_path(const std::string& path, const std::string& option, const std::vector<std::string>& inputs) {
  if (path.empty()) throw InputError(option + ": empty path");
  if (path.back() == '/') throw InputError(option + " " + path + ": names a directory, not a file");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) throw InputError(option + " " + path + ": is " + kind_of(st.st_mode) + ", not a regular file");
    for (const std::string& in : inputs) {
      struct stat si {};
      if (!in.empty() && ::stat(in.c_str(), &si) == 0 && si.st_dev == st.st_dev && si.st_ino == st.st_ino)
        throw InputError(option + " " + path + ": is the input " + in + " (refusing to overwrite an input)");
    }
  } else if (errno != ENOENT) {
    throw InputError(option + " " + path + ": " + std::strerror(errno));
  }
  const std::string dir = dir_of(path);
  struct stat sd {};
  if (::stat(dir.c_str(), &sd) != 0) throw InputError(option + " " + path + ": directory " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(sd.st_mode)) throw InputError(option + " " + path + ": " + dir + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw InputError(option + " " + path + ": directory " + dir + " is not writable: " + std::strerror(errno));
}

void require_distinct_outputs(const std::string& a, const std::string& option_a, const std::string& b,
                              const std::string& option_b) {
  if (a.empty() || b.empty()) return;
  struct stat sa {}, sb {};
  const bool same = a == b || (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
                               sa.st_ino == sb.st_ino);
  if (same) throw InputError(option_a + " and " + option_b + " name the same file " + a);
}

double require_finite_nonnegative(double v, const std::string& option) {
  if (!std::isfinite(v) || v < 0) throw InputError(option + " must be a finite number >= 0, not " + std::to_string(v));
  return v;
}

double require_gib(double v, const std::string& option) {
  if (!std::isfinite(v) || v < 0 || v > 1e6) {
    char t[32];
    std::snprintf(t, sizeof t, "%g", v);
    throw InputError(option + " must be a number of GiB in [0, 1e6], not " + t);
  }
  return v;
}

int64_t require_count(int64_t v, const std::string& option, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    throw InputError(option + " " + std::to_string(v) + ": must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

void require_case_name(const std::string& name, const std::string& option) {
  if (name.empty()) throw InputError(option + ": empty name");
  if (name == "." || name == "..") throw InputError(option + " " + name + ": not a name for a case group");
  if (name.find('/') != std::string::npos) throw InputError(option + " " + name + ": a case name cannot hold '/' (an HDF5 group path)");
  for (unsigned char ch : name)
    if (ch < 0x20 || ch == 0x7f) throw InputError(option + " " + name + ": a case name cannot hold control characters");
}

uint64_t free_bytes_for(const std::string& path) {
  struct statvfs s {};
  const std::string dir = dir_of(path);
  if (::statvfs(dir.c_str(), &s) != 0) throw InputError(path + ": cannot query free space: " + std::strerror(errno));
  return static_cast<uint64_t>(s.f_bavail) * static_cast<uint64_t>(s.f_frsize);
}

void require_fault_name(const std::string& name) {
  if (name.empty() || name == "none") return;
  std::string list;
  for (std::string_view k : kFaultNames) {
    if (k == name) return;
    list += (list.empty() ? "" : ", ") + std::string(k);
  }
  throw InputError("--fault: unknown fault '" + name + "' (known: none, " + list + ")");
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == ',' || ch == ' ' || ch == '\n' || ch == '\t') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::vector<int64_t> parse_int_list(const std::string& s, const std::string& option, int64_t lo, int64_t hi,
                                    const std::string& what) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    item = a == std::string::npos ? "" : item.substr(a, b - a + 1);  // blanks around an item are fine
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || !(std::isdigit((unsigned char)item[0]) || item[0] == '-') || used != item.size() || v < lo || v > hi)
      throw InputError(option + ": '" + item + "' in '" + s + "' is not " + what + " (integers " + std::to_string(lo) + ".." +
                       std::to_string(hi) + ", comma-separated)");
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace mlaconf::cli
