// Intra-op threading: how many threads a kernel called from *this* thread may use.
//
// The setting is per calling thread, so two replicas on two threads can each be given one core and
// not oversubscribe the machine. Kernels read it through `parallel_for` (OpenMP underneath) and the
// BLAS/oneDNN wrappers. The default is STRATA_NUM_THREADS from the environment, else every core.
// Thread-safety: all functions are safe from any thread; each affects only the calling thread.
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
