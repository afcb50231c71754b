// Per-thread intra-op thread counts, the process-wide default they fall back to, and an OpenMP-backed
// parallel_for. Thread-safety: the default is an atomic; the per-thread count is thread_local.
#include "strata/threading.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

#include "core/cpu_limits.h"

namespace strata {

namespace {
// STRATA_NUM_THREADS when it is a positive integer, else 0.
int threads_from_environment() {
  const char* env = std::getenv("STRATA_NUM_THREADS");
  const int n = env != nullptr ? std::atoi(env) : 0;
  return n > 0 ? n : 0;
}
std::atomic<int> g_default_threads{0};  // 0: STRATA_NUM_THREADS, else usable_cores()
thread_local int t_num_threads = 0;     // 0: default
}  // namespace

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

int usable_cores() {
  static const int cores = detail::usable_cores(detail::read_cpu_limits());
  return cores;
}

int default_num_threads() {
  if (const int set = g_default_threads.load(std::memory_order_relaxed); set > 0) return set;
  static const int from_environment = threads_from_environment();
  return from_environment > 0 ? from_environment : usable_cores();
}

void set_default_num_threads(int n) { g_default_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }

int num_threads() { return t_num_threads > 0 ? t_num_threads : default_num_threads(); }

void set_num_threads(int n) {
  t_num_threads = n > 0 ? n : 0;
  // OpenMP's thread count is a per-thread setting too; oneDNN reads it.
  omp_set_num_threads(num_threads());
}

ScopedNumThreads::ScopedNumThreads(int n) : previous_(t_num_threads) { set_num_threads(n); }
ScopedNumThreads::~ScopedNumThreads() { set_num_threads(previous_); }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int threads = static_cast<int>(std::min<int64_t>(num_threads(), (n + grain - 1) / grain));
  if (threads <= 1) {
    fn(begin, end);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t b = begin + t * chunk;
    const int64_t e = std::min(end, b + chunk);
    if (b < e) fn(b, e);
  }
}

}  // namespace strata
