// mlaconf CLI: checks every subcommand runs on its arguments before any work starts.
//
// Each throws InputError (exit 2, one line) naming the option and the problem. None of them opens a
// file for reading (stat only), so a FIFO without a writer is refused instead of blocking.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mlaconf::cli {

// `path` exists and is a regular file (not a directory, FIFO, device or socket).
void require_regular_file(const std::string& path, const std::string& option);

// `path` can be written atomically: its directory exists and is writable, it is not a directory or a
// special file, and it is none of `inputs` (same inode: a hard link or another spelling counts).
void require_output_path(const std::string& path, const std::string& option, const std::vector<std::string>& inputs);

// Two outputs of one command must differ (--json and --plot on the same file would clobber each other).
void require_distinct_outputs(const std::string& a, const std::string& option_a, const std::string& b,
                              const std::string& option_b);

// A finite number >= 0; returns it.
double require_finite_nonnegative(double v, const std::string& option);

// A memory budget in GiB: finite, in [0, 1e6] (plan's bound too), so that its byte count fits size_t (1e300
// passed as finite and its conversion to bytes overflowed); returns it.
double require_gib(double v, const std::string& option);

// A count or size option in [lo, hi] (checked before any sum of counts, so that no sum can overflow:
// hi is at most kMaxCount); returns it.
inline constexpr int64_t kMaxCount = int64_t{1} << 31;
int64_t require_count(int64_t v, const std::string& option, int64_t lo, int64_t hi = kMaxCount);

// A name that becomes an HDF5 group (a case name): not empty, no '/', not "." or "..", no control
// characters.
void require_case_name(const std::string& name, const std::string& option);

// Free bytes for an unprivileged writer on the filesystem holding `path`'s directory.
uint64_t free_bytes_for(const std::string& path);

// The optimized pipeline's fault names (optimized/faults.h), checked whatever this build holds, so a
// typo is exit 2 on every machine ("" and "none" mean no fault).
void require_fault_name(const std::string& name);

// A list option's items: split at commas and blanks, empty items dropped ("0, 3,40" -> 0 3 40).
std::vector<std::string> split_list(const std::string& s);

// A comma-separated list of integers in [lo, hi] ("1,8,32", "1, 8"): no empty item, no trailing comma, no
// blank inside an item.
// InputError names the option and says what an item must be (`what`, e.g. "a CUDA device ordinal").
std::vector<int64_t> parse_int_list(const std::string& s, const std::string& option, int64_t lo, int64_t hi,
                                    const std::string& what);

}  // namespace mlaconf::cli
