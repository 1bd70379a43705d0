// mlaconf reference: how many threads the reference uses, and the two ways it splits work over them.
//
// The reference's results never depend on the thread count: work is split only where every output value
// is computed by the same code in the same order whatever the split (OpenMP loops over rows, heads or
// query rows, each piece running Eigen single-threaded). Eigen's own parallel GEMM is switched off
// (EIGEN_DONT_PARALLELIZE, reference/CMakeLists.txt): its blocking over the inner dimension changes with
// the thread count, and with it the rounding. A loop inside another parallel loop runs on its thread.
// Blocks of rows of a row-major matrix start at multiples of kRowAlign rows, so that a block starts on
// the same SIMD alignment as the whole matrix (Eigen's vectorized loops peel by address).
#pragma once
#include <cstdint>
#include <functional>

namespace mlaconf::ref {

// Sets the number of threads of every later reference call (>= 1); 0 = every core (the default).
void set_threads(int n);
int threads();

inline constexpr int64_t kRowAlign = 16;

// fn(begin, end) on contiguous blocks of [0, n) in parallel: at most threads() blocks, each at least
// `min_rows` rows (so a short range runs as one call), boundaries at multiples of `align`. The first
// exception (in block order) is rethrown after every block has finished.
void for_row_blocks(int64_t n, int64_t min_rows, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t align = kRowAlign);

// fn(i) for i in [0, n) in parallel, dynamically scheduled (items of uneven cost: query rows, heads,
// experts). The first exception (in index order) is rethrown after every item has finished.
void for_each_index(int64_t n, const std::function<void(int64_t)>& fn);

// work(i, slot) for i in [0, n) on at most `max_threads` threads (and at most threads()), handed out in
// ascending i as threads come free; `slot` in [0, max_threads) is the running thread's own index, so that
// work can keep one buffer per slot (at most max_threads buffers exist). commit(i) then runs for every i in
// ascending order, one at a time, as soon as work(0..i) are done (on whichever thread finished the last of
// them): what commit adds up is added in the same order whatever the thread count. work runs on its thread
// alone (a loop inside it does not split). With one thread, or inside a parallel loop: work(i, 0) then
// commit(i), i ascending, on the calling thread. After an exception no later item starts and no later
// commit runs; the first exception in index order is rethrown once the running items have finished.
void for_each_in_order(int64_t n, int64_t max_threads, const std::function<void(int64_t, int64_t)>& work,
                       const std::function<void(int64_t)>& commit);

}  // namespace mlaconf::ref
