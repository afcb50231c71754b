// The strategies of one machine: OneDeviceStrategy, MirroredStrategy and CentralStorageStrategy.
//
//   distribute::OneDeviceStrategy one("/cpu:0");                  // one replica, on the calling thread
//   distribute::MirroredStrategy mirrored({"/cpu:0", "/cpu:1"});  // two replicas, each a thread with half the cores
//   auto two = distribute::MirroredStrategy::cpu_replicas(2);     // the same
//   distribute::CentralStorageStrategy central({"/cpu:0", "/cpu:1"});
//
// MirroredStrategy keeps one copy of every variable per replica. Each replica's gradients are grouped
// into buckets of about `bucket_bytes` in reverse variable order (the order backward produces them);
// a bucket's sum starts as soon as every replica's backward has produced all of it, while backward
// goes on: with reduction_to_one_device on the last replica to produce it, with ring or tree on the
// communicator's threads. The update runs once per step and writes every replica's copy, so the
// copies stay bit-identical: inside Optimizer::minimize (Model::fit) the replica that sums a bucket
// also updates its variables at once, during backward; after a plain apply_gradients the last replica
// to call it updates everything while the others wait. CentralStorageStrategy keeps one copy
// on the host: replicas compute on it, their gradients are summed once, the update runs once (with all
// the cores) while the replicas wait, and they read the new values in place.
//
// A "/gpu:N" device needs the CUDA build and the GPU issue's kernels: here it is Unavailable.
//
// Thread-safety: as Strategy (one driving thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "strata/comm/local.h"
#include "strata/distribute/strategy.h"

namespace strata::distribute {

// One replica on one device; variables are placed there (tf.distribute.OneDeviceStrategy).
class OneDeviceStrategy final : public Strategy {
 public:
  explicit OneDeviceStrategy(const std::string& device = "/cpu:0");
  std::string name() const override { return "OneDeviceStrategy"; }
  Variable create_variable(const Tensor& initial_value, const VariableOptions& options) override;
};

// The cross-device ops MirroredStrategy uses unless told otherwise, as TensorFlow does for CPU replicas:
// the replicas sum each bucket themselves, with no communicator threads. Measured on the 2-core CNN bench it
// made about 9x fewer context switches than `ring` and used less CPU per image.
inline constexpr const char* kDefaultCrossDeviceOps = "reduction_to_one_device";

// How MirroredStrategy reduces gradients across its replicas (tf's cross_device_ops).
struct CrossDeviceOps {
  comm::AllReduceAlgorithm algorithm = comm::AllReduceAlgorithm::kReduceToOne;  // kDefaultCrossDeviceOps
  // Gradients are reduced in buckets of about this many bytes (a larger variable is a bucket of its own).
  int64_t bucket_bytes = 256 << 10;

  static CrossDeviceOps reduction_to_one_device() { return {comm::AllReduceAlgorithm::kReduceToOne}; }
  static CrossDeviceOps ring_all_reduce() { return {comm::AllReduceAlgorithm::kRing}; }
  static CrossDeviceOps tree_all_reduce() { return {comm::AllReduceAlgorithm::kTree}; }
  // "reduction_to_one_device", "ring", "tree"; "nccl" is Unavailable without the CUDA build.
  static CrossDeviceOps from_name(const std::string& name);
};

struct MirroredOptions {
  CrossDeviceOps cross_device_ops;
  int threads_per_replica = 0;  // 0: this thread's num_threads() split evenly over the replicas
};

class MirroredStrategy final : public Strategy {
 public:
  // devices: "/cpu:0", "/cpu:1", ... (each a replica; empty means one replica on "/cpu:0").
  explicit MirroredStrategy(std::vector<std::string> devices = {}, MirroredOptions options = {});
  ~MirroredStrategy() override;
  // n CPU replicas: "/cpu:0" ... "/cpu:<n-1>".
  static std::vector<std::string> cpu_devices(int n);
  static std::unique_ptr<MirroredStrategy> cpu_replicas(int n, MirroredOptions options = {});

  std::string name() const override { return "MirroredStrategy"; }
  const CrossDeviceOps& cross_device_ops() const { return options_.cross_device_ops; }
  Variable create_variable(const Tensor& initial_value, const VariableOptions& options) override;

 protected:
  GradientAggregator* aggregator(int replica) override;
  void on_replica_failure(const std::string& reason) override;

 private:
  class Aggregator;
  struct SharedPlan;
  // The plan all replicas share for the sources `ids`, made by `make` on first use.
  SharedPlan& shared_plan(const std::vector<uint64_t>& ids, const std::function<std::unique_ptr<SharedPlan>()>& make);
  MirroredOptions options_;
  std::vector<std::shared_ptr<comm::Communicator>> comms_;  // ring and tree; none for reduction to one device
  std::vector<std::unique_ptr<Aggregator>> aggregators_;
  std::mutex shared_plans_mutex_;
  std::map<std::vector<uint64_t>, std::unique_ptr<SharedPlan>> shared_plans_;
  std::atomic<bool> aborted_{false};
  std::atomic<int> finished_updates_{0};  // replicas done with a step updated during backward (finish_step)
};

class CentralStorageStrategy final : public Strategy {
 public:
  explicit CentralStorageStrategy(std::vector<std::string> devices = {}, int threads_per_replica = 0);
  ~CentralStorageStrategy() override;
  std::string name() const override { return "CentralStorageStrategy"; }
  Variable create_variable(const Tensor& initial_value, const VariableOptions& options) override;

 protected:
  GradientAggregator* aggregator(int replica) override;

 private:
  class Aggregator;
  struct Shared;
  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Aggregator>> aggregators_;
};

// A strategy by its CLI name: "one_device" (or "default"), "mirrored", "central_storage", with `replicas`
// CPU replicas (ignored for one_device). InvalidArgument lists the choices.
std::unique_ptr<Strategy> make_strategy(const std::string& name, int replicas = 1,
                                        const std::string& cross_device_ops = kDefaultCrossDeviceOps);

}  // namespace strata::distribute
