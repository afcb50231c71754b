// Internal: WorkerThreads, the threads a parallel iterator owns. Each worker runs `body` after
// strata::set_num_threads(1) (so data workers never oversubscribe oneDNN/OpenMP). The owner stops
// its body (a flag + notify of its condition variables) before destruction; the destructor joins.
// Thread-safety: start/join from the owning thread only.
#pragma once

#include <functional>
#include <thread>
#include <vector>

#include "strata/threading.h"

namespace strata::data::detail {

class WorkerThreads {
 public:
  WorkerThreads() = default;
  WorkerThreads(const WorkerThreads&) = delete;
  WorkerThreads& operator=(const WorkerThreads&) = delete;
  ~WorkerThreads() { join(); }

  // Starts n threads running body(worker_index).
  void start(int64_t n, const std::function<void(int64_t)>& body) {
    threads_.reserve(threads_.size() + static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      threads_.emplace_back([body, i] {
        set_num_threads(1);
        body(i);
      });
  }
  void join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }
  bool running() const { return !threads_.empty(); }

 private:
  std::vector<std::thread> threads_;
};

}  // namespace strata::data::detail
