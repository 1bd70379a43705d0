// mlaconf: every file mlaconf writes goes through here (one place for the temp-file rules).
//
// A file is written under "<name>.tmp.<8 random characters>" in <path>'s own folder (created with
// O_CREAT|O_EXCL|O_NOFOLLOW: a link or file planted at that name is never followed or reused; <name> is
// cut so the temporary name fits NAME_MAX for any legal output name), fsync'ed, closed with its result
// checked, and renamed onto <path>: the rename is the only way a result appears. A failure at any step
// (ENOSPC and EFBIG included) removes the temporary file and throws InputError (exit 2). The temporary
// name is registered in a process-wide table that a SIGINT/SIGTERM handler empties (unlink is
// async-signal-safe) before the process exits 130/143, so Ctrl-C never leaves a half-written file behind.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace mlaconf {

// Installs the SIGINT/SIGTERM handler: remove every registered temporary file, then _exit(128 + sig).
// Idempotent; TempFileName installs it too, so library users get it without calling this.
void install_interrupt_cleanup();

// Creates the temporary file of `final_path` (see above) and registers it for removal on interrupt for
// as long as it lives; removes the file in its destructor unless renamed into place. AtomicFile below is
// built on it.
class TempFileName {
 public:
  explicit TempFileName(const std::string& final_path);
  ~TempFileName();
  TempFileName(const TempFileName&) = delete;
  TempFileName& operator=(const TempFileName&) = delete;
  const std::string& path() const { return tmp_; }
  const std::string& final_path() const { return final_; }
  // The descriptor of the created file (read and write: the HDF5 writer reads back what it wrote); the
  // caller closes it (once) before the rename.
  int fd() const { return fd_; }
  // Hands the descriptor to a caller that closes it; the file is still removed unless renamed into place.
  int release_fd() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Renames onto the final path (the caller has fsync'ed and closed fd()); the name is then released.
  void rename_into_place();

 private:
  std::string final_, tmp_;
  int slot_ = -1;
  int fd_ = -1;
};

// A file descriptor on a TempFileName. write() and commit() throw InputError naming the final path.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t n);
  uint64_t pos() const { return pos_; }
  // Extends the file to `size` without writing (a sparse hole) and seeks there.
  void extend_to(uint64_t size);
  // fsync, checked close, rename into place.
  void commit();
  // The two halves of commit(), for outputs of several files that appear together (a split GGUF):
  // finish() every file (fsync, checked close; the temporary name stays registered and is removed if
  // the object dies unrenamed), then rename_into_place() each.
  void finish();
  void rename_into_place() { name_.rename_into_place(); }

 private:
  TempFileName name_;
  int fd_ = -1;
  uint64_t pos_ = 0;
};

// Writes `data` to `path` atomically through AtomicFile.
void write_file_atomic(const std::string& path, const void* data, size_t n);
inline void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
}

}  // namespace mlaconf
