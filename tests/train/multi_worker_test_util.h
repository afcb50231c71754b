// Test helpers: MultiWorkerMirroredStrategy workers as threads of this process, each with its own TF_CONFIG task,
// coordination client and gloo communicator over 127.0.0.1 ports the OS picked.
// Thread-safety: on_every_worker runs its body on one thread per worker and joins them all.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "strata/distribute/multi_worker.h"
#include "test_util.h"

namespace strata::distribute::test_workers {

inline cluster::TaskInfo worker_task(const cluster::ClusterSpec& spec, int index) {
  return cluster::resolve_tf_config(cluster::make_tf_config(spec, "worker", index));
}

inline cluster::ClusterSpec local_cluster(int workers) {
  cluster::ClusterSpec spec;
  for (int i = 0; i < workers; ++i) spec.jobs["worker"].push_back("127.0.0.1:" + std::to_string(test::free_port()));
  return spec;
}

inline CommunicationOptions quick_options() {
  return {.timeout = std::chrono::seconds(20),
          .heartbeat_timeout = std::chrono::seconds(3),
          .heartbeat_interval = std::chrono::milliseconds(200)};
}

// Runs body(w, strategy) for each of `workers` workers of `local` replicas, each on its own thread with its own
// MultiWorkerMirroredStrategy (with `options`) on a fresh 127.0.0.1 cluster; fails the test with any worker's error.
inline void on_every_worker(int workers, int local, const std::function<void(int, MultiWorkerMirroredStrategy&)>& body,
                            const CommunicationOptions& options = quick_options()) {
  const cluster::ClusterSpec spec = local_cluster(workers);
  std::vector<std::string> errors(static_cast<size_t>(workers));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        MultiWorkerMirroredStrategy strategy(worker_task(spec, w), options, local);
        body(w, strategy);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(w)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < workers; ++w) ASSERT_EQ(errors[static_cast<size_t>(w)], "") << "worker " << w;
}

}  // namespace strata::distribute::test_workers
