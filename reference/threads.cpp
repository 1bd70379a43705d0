// mlaconf reference: thread count and parallel loops (see threads.h), on OpenMP.
#include "reference/threads.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace mlaconf::ref {

namespace {
int g_threads = 0;  // 0: every core

int cores() {
#ifdef _OPENMP
  return std::max(1, omp_get_num_procs());
#else
  return 1;
#endif
}

// Rethrows the first stored exception.
void rethrow_first(const std::vector<std::exception_ptr>& err) {
  for (const auto& e : err)
    if (e) std::rethrow_exception(e);
}
}  // namespace

void set_threads(int n) {
  g_threads = std::max(0, n);
}

int threads() {
#ifdef _OPENMP
  return g_threads > 0 ? g_threads : cores();
#else
  return 1;
#endif
}

void for_row_blocks(int64_t n, int64_t min_rows, const std::function<void(int64_t, int64_t)>& fn, int64_t align) {
  if (n <= 0) return;
#ifdef _OPENMP
  if (omp_in_parallel()) {  // already inside a parallel loop: the split would not change the values
    fn(0, n);
    return;
  }
#endif
  const int64_t by_size = n / std::max<int64_t>(min_rows, 1);
  const int64_t nb = std::clamp<int64_t>(by_size, 1, threads());
  if (nb == 1) {
    fn(0, n);
    return;
  }
  // Equal blocks, each boundary rounded down to a multiple of `align`.
  align = std::max<int64_t>(align, 1);
  std::vector<int64_t> edge(static_cast<size_t>(nb + 1));
  for (int64_t b = 0; b <= nb; ++b) edge[b] = b == nb ? n : (n * b / nb) / align * align;
  std::vector<std::exception_ptr> err(static_cast<size_t>(nb));
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(nb))
  for (int64_t b = 0; b < nb; ++b) {
    try {
      if (edge[b] < edge[b + 1]) fn(edge[b], edge[b + 1]);
    } catch (...) {
      err[b] = std::current_exception();
    }
  }
  rethrow_first(err);
}

void for_each_index(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  int nt = static_cast<int>(std::min<int64_t>(n, threads()));
#ifdef _OPENMP
  if (omp_in_parallel()) nt = 1;
#endif
  if (nt <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::exception_ptr> err(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int64_t i = 0; i < n; ++i) {
    try {
      fn(i);
    } catch (...) {
      err[i] = std::current_exception();
    }
  }
  rethrow_first(err);
}

void for_each_in_order(int64_t n, int64_t max_threads, const std::function<void(int64_t, int64_t)>& work,
                       const std::function<void(int64_t)>& commit) {
  if (n <= 0) return;
  int nt = static_cast<int>(std::min<int64_t>({n, std::max<int64_t>(max_threads, 1), threads()}));
#ifdef _OPENMP
  if (omp_in_parallel()) nt = 1;
#endif
  if (nt <= 1) {
    for (int64_t i = 0; i < n; ++i) {
      work(i, 0);
      commit(i);
    }
    return;
  }
#ifdef _OPENMP
  // state[i]: 0 running or not started, 1 done, 2 failed or skipped. next: the first item not committed.
  // first_bad: the first item that failed (n: none); later items do not start.
  std::vector<uint8_t> state(static_cast<size_t>(n), 0);
  std::vector<std::exception_ptr> err(static_cast<size_t>(n));
  std::mutex mu;
  int64_t next = 0;
  std::atomic<int64_t> first_bad{n};
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int64_t i = 0; i < n; ++i) {
    bool ok = false;
    if (i < first_bad.load()) {
      try {
        work(i, omp_get_thread_num());
        ok = true;
      } catch (...) {
        err[i] = std::current_exception();
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    state[i] = ok ? 1 : 2;
    if (!ok && i < first_bad.load()) first_bad = i;
    for (; next < n && state[next] == 1; ++next) {
      try {
        commit(next);
      } catch (...) {
        err[next] = std::current_exception();
        state[next] = 2;
        if (next < first_bad.load()) first_bad = next;
        break;
      }
    }
  }
  rethrow_first(err);
#endif
}

}  // namespace mlaconf::ref
