// mlaconf: atomic file writes and their interrupt cleanup (see atomic_file.h).
#include "core/atomic_file.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace mlaconf {
namespace {

// The registry the signal handler reads: fixed slots of NUL-terminated names, no allocation. A slot is
// claimed by setting `used` after the name is in place, and given up by clearing it first.
constexpr int kSlots = 1024;  // a split GGUF holds all its shards' names until they appear together
constexpr size_t kNameMax = 4096;
struct Slot {
  std::atomic<bool> used{false};
  char name[kNameMax];
};
Slot g_slots[kSlots];
std::mutex g_claim;

extern "C" void on_interrupt(int sig) {
  for (Slot& s : g_slots)
    if (s.used.load()) ::unlink(s.name);
  ::_exit(128 + sig);
}

int claim(const std::string& name) {
  install_interrupt_cleanup();
  if (name.size() >= kNameMax) throw InputError(name + ": path too long");
  std::lock_guard<std::mutex> lock(g_claim);
  for (int i = 0; i < kSlots; ++i)
    if (!g_slots[i].used.load()) {
      std::memcpy(g_slots[i].name, name.c_str(), name.size() + 1);
      g_slots[i].used.store(true);
      return i;
    }
  throw InputError(name + ": too many files open for writing at once");
}

void release(int slot) {
  if (slot >= 0) g_slots[slot].used.store(false);
}

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  throw InputError(path + ": " + what + ": " + std::strerror(err));
}

}  // namespace

void install_interrupt_cleanup() {
  static const bool done = [] {
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    for (int sig : {SIGINT, SIGTERM}) {
      // A signal ignored by whoever started us (nohup, a background job of a script) stays ignored.
      struct sigaction old {};
      if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
      sigaction(sig, &sa, nullptr);
    }
    // A file-size limit (ulimit -f) should read as a failed write (EFBIG), not kill the process.
    signal(SIGXFSZ, SIG_IGN);
    return true;
  }();
  (void)done;
}

namespace {

// `n` characters of [0-9A-Za-z] from the kernel's random source (unpredictable: another user cannot
// plant a link at the name before we create it; O_EXCL refuses one anyway).
std::string random_suffix(size_t n) {
  static const char kAlphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  unsigned char b[32];
  size_t got = 0;
  while (got < n) {
    const ssize_t k = ::getrandom(b + got, n - got, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      throw InputError(std::string("cannot draw a temporary file name: getrandom: ") + std::strerror(errno));
    }
    got += static_cast<size_t>(k);
  }
  std::string s(n, '0');
  for (size_t i = 0; i < n; ++i) s[i] = kAlphabet[b[i] % 62];
  return s;
}

}  // namespace

TempFileName::TempFileName(const std::string& final_path) : final_(final_path) {
  const size_t slash = final_path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : final_path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? final_path : final_path.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") throw InputError(final_path + ": not a file name");
  // "<base, cut>.tmp.<8 random>": at most NAME_MAX bytes whatever the length of base.
  constexpr size_t kRandom = 8;
  const std::string tail = ".tmp.";
  const size_t keep = std::min(base.size(), static_cast<size_t>(NAME_MAX) - tail.size() - kRandom);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string candidate = dir + base.substr(0, keep) + tail + random_suffix(kRandom);
    // Registered before it exists, so that an interrupt between create and register cannot leave it.
    slot_ = claim(candidate);
    fd_ = ::open(candidate.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      tmp_ = candidate;
      return;
    }
    const int e = errno;
    release(slot_);
    slot_ = -1;
    if (e != EEXIST) fail(final_path, "cannot create a temporary file in its folder", e);
  }
  throw InputError(final_path + ": cannot create a temporary file in its folder: 100 names taken");
}

TempFileName::~TempFileName() {
  if (slot_ >= 0) {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(tmp_.c_str());
    release(slot_);
  }
}

void TempFileName::rename_into_place() {
  if (std::rename(tmp_.c_str(), final_.c_str()) != 0) fail(final_, "cannot rename into place", errno);
  release(slot_);
  slot_ = -1;
}

AtomicFile::AtomicFile(const std::string& path) : name_(path), fd_(name_.fd()) {}

AtomicFile::~AtomicFile() = default;  // name_ closes the descriptor and removes the file unless committed

void AtomicFile::write(const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t k = ::write(fd_, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail(name_.final_path(), "write failed", errno);
    }
    p += k;
    n -= static_cast<size_t>(k);
    pos_ += static_cast<uint64_t>(k);
  }
}

void AtomicFile::extend_to(uint64_t size) {
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) fail(name_.final_path(), ("cannot extend to " + std::to_string(size) + " bytes").c_str(), errno);
  if (::lseek(fd_, static_cast<off_t>(size), SEEK_SET) < 0) fail(name_.final_path(), "seek failed", errno);
  pos_ = size;
}

void AtomicFile::commit() {
  finish();
  name_.rename_into_place();
}

void AtomicFile::finish() {
  const int fd = name_.release_fd();
  fd_ = -1;  // closed exactly once, here, whatever happens below
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    fail(name_.final_path(), "cannot flush", e);
  }
  if (::close(fd) != 0) fail(name_.final_path(), "cannot close", errno);
}

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  AtomicFile f(path);
  f.write(data, n);
  f.commit();
}

}  // namespace mlaconf
