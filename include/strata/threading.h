// Intra-op threading: how many threads a kernel called from *this* thread may use.
//
// The setting is per calling thread, so two replicas on two threads can each be given one core and
// not oversubscribe the machine. Kernels read it through `parallel_for` (OpenMP underneath) and the
// BLAS/oneDNN wrappers. A thread that never set its count uses the process's default: the one
// set_default_num_threads gave (the `strata` CLI sets this process's share of its host's cores, see
// strata/cluster/host_cores.h), else STRATA_NUM_THREADS from the environment, else usable_cores().
// Thread-safety: all functions are safe from any thread; set_num_threads affects only the calling thread,
// set_default_num_threads every thread that has not set its own count.
#pragma once

#include <cstdint>
#include <functional>

namespace strata {

// Threads that kernels called from this thread may use (>= 1).
int num_threads();
// Sets num_threads() for this thread; n <= 0 restores the default.
void set_num_threads(int n);
// Number of cores of the machine.
int hardware_threads();
// Cores this process may keep busy: its CPU affinity mask, lowered to its cgroup's CPU quota (rounded up).
int usable_cores();
// The count of a thread that has not set its own (see the top of this file).
int default_num_threads();
// Sets the process-wide default; n <= 0 goes back to STRATA_NUM_THREADS, else usable_cores().
void set_default_num_threads(int n);

// Sets num_threads() for the lifetime of the guard, then restores the previous value.
class ScopedNumThreads {
 public:
  explicit ScopedNumThreads(int n);
  ~ScopedNumThreads();
  ScopedNumThreads(const ScopedNumThreads&) = delete;
  ScopedNumThreads& operator=(const ScopedNumThreads&) = delete;

 private:
  int previous_;
};

// Splits [begin, end) into chunks of at least `grain` iterations and runs fn(chunk_begin, chunk_end)
// on up to num_threads() threads; runs inline when the range is small. fn must not throw.
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace strata
