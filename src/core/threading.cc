// Per-thread intra-op thread counts and an OpenMP-backed parallel_for.
#include "strata/threading.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace strata {

namespace {
int default_threads() {
  static const int value = [] {
    if (const char* env = std::getenv("STRATA_NUM_THREADS")) {
      const int n = std::atoi(env);
      if (n > 0) return n;
    }
    return hardware_threads();
  }();
  return value;
}
thread_local int t_num_threads = 0;  // 0: default
}  // namespace

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

int num_threads() { return t_num_threads > 0 ? t_num_threads : default_threads(); }

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
