// The strategies of one machine: OneDeviceStrategy, MirroredStrategy and CentralStorageStrategy.
//
//   distribute::OneDeviceStrategy one("/cpu:0");                  // one replica, on the calling thread
//   distribute::MirroredStrategy mirrored({"/cpu:0", "/cpu:1"});  // two replicas, each a thread with half the cores
//   auto two = distribute::MirroredStrategy::cpu_replicas(2);     // the same
//   distribute::CentralStorageStrategy central({"/cpu:0", "/cpu:1"});
//
// MirroredStrategy keeps one copy of every variable per replica. Every exchange between the replicas goes
// through the strategy's local communicator group (strata/comm/local.h), whose all_reduce algorithm the
// cross-device ops choose. Each replica's gradients are grouped into buckets of about `bucket_bytes` in reverse
// variable order (the order backward produces them); a bucket's all-reduce starts as soon as the replica's
// backward has produced all of it, while backward goes on. The update runs once per step and writes every
// replica's copy, so the copies stay bit-identical: inside Optimizer::minimize (Model::fit) the replicas share
// the buckets out and each updates its buckets' variables as soon as their sums are in, during backward; after a
// plain apply_gradients the last replica to call it updates everything while the others wait.
// CentralStorageStrategy keeps one copy on the host: replicas compute on it, their gradients are summed the same
// way, and the one copy is updated once per step, before any replica goes on to the next.
//
// OneDeviceStrategy("/gpu:N") puts the variables and each batch of fit/evaluate/predict on GPU N: it needs a build
// with CUDA (STRATA_WITH_CUDA) and that GPU visible, else it is Unavailable saying which (the build, or how many GPUs
// are visible). MirroredStrategy({"/gpu:0", "/gpu:1"}) puts replica r's copy of every variable and its batches on its
// GPU, and its local group is an in-process NCCL group (comm::make_nccl_local_group, one rank per replica thread):
// the gradient buckets are on the replicas' GPUs and all-reduced by NCCL, the same GradientReducer and
// AllReduceAggregator as on CPU replicas. On GPUs the update runs once per step in merge_call (none during
// backward): the first copy is updated on its GPU with the optimizer's slots beside it, then copied to the others.
// GPU replicas take the aggregator even when there is one, so that one GPU runs the path of several. A CPU device
// beside a GPU one is InvalidArgument naming both. Central storage runs CPU replicas only: a "/gpu:N" there is
// Unavailable.
//
// Thread-safety: as Strategy (one driving thread).
#pragma once

#include <cstdint>
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

// The cross-device ops MirroredStrategy uses unless told otherwise, as TensorFlow does for CPU replicas.
inline constexpr const char* kDefaultCrossDeviceOps = "reduction_to_one_device";

// How MirroredStrategy reduces gradients across its replicas (tf's cross_device_ops).
struct CrossDeviceOps {
  comm::AllReduceAlgorithm algorithm = comm::AllReduceAlgorithm::kReduceToOne;  // kDefaultCrossDeviceOps
  // Gradients are reduced in buckets of about this many bytes (a larger variable is a bucket of its own).
  int64_t bucket_bytes = 256 << 10;
  // NCCL all-reduce across GPU replicas (`algorithm` is then unused). GPU replicas always reduce with NCCL, as
  // TensorFlow's default for GPUs: the default ops (reduction_to_one_device) mean NCCL there, and 'ring' or 'tree'
  // is InvalidArgument; CPU replicas with 'nccl' are InvalidArgument.
  bool nccl = false;

  static CrossDeviceOps reduction_to_one_device() { return {comm::AllReduceAlgorithm::kReduceToOne}; }
  static CrossDeviceOps ring_all_reduce() { return {comm::AllReduceAlgorithm::kRing}; }
  static CrossDeviceOps tree_all_reduce() { return {comm::AllReduceAlgorithm::kTree}; }
  static CrossDeviceOps nccl_all_reduce() { return {.nccl = true}; }
  // "reduction_to_one_device", "ring", "tree", "nccl" (GPU replicas); anything else is InvalidArgument.
  static CrossDeviceOps from_name(const std::string& name);
};

struct MirroredOptions {
  CrossDeviceOps cross_device_ops;
  int threads_per_replica = 0;  // 0: this thread's num_threads() split evenly over the replicas
};

class MirroredStrategy final : public Strategy {
 public:
  // devices: "/cpu:0", "/cpu:1", ... or "/gpu:0", "/gpu:1", ... (each a replica). Empty, as TensorFlow's
  // MirroredStrategy() takes every device, means default_cpu_replicas() replicas: one per core this thread may use, as
  // `strata train --strategy mirrored`.
  explicit MirroredStrategy(std::vector<std::string> devices = {}, MirroredOptions options = {});
  // The replicas a MirroredStrategy (or CentralStorageStrategy) makes by default: this thread's num_threads() (the
  // cores it may run on, or what set_num_threads / STRATA_NUM_THREADS / the CLI's core share chose), at least 1.
  static int default_cpu_replicas();
  ~MirroredStrategy() override;
  // n CPU replicas: "/cpu:0" ... "/cpu:<n-1>".
  static std::vector<std::string> cpu_devices(int n);
  static std::unique_ptr<MirroredStrategy> cpu_replicas(int n, MirroredOptions options = {});

  std::string name() const override { return "MirroredStrategy"; }
  // The ops in use: on GPU replicas always NCCL.
  const CrossDeviceOps& cross_device_ops() const { return options_.cross_device_ops; }
  Variable create_variable(const Tensor& initial_value, const VariableOptions& options) override;

 protected:
  GradientAggregator* aggregator(int replica) override;
  // On GPUs every rank of the NCCL group is aborted (aborting one does not wake the others), then the default.
  void on_replica_failure(const std::string& reason) override;

 private:
  // `checked`: the devices and `options` as checked_mirrored_devices (mirrored.cc) left them.
  MirroredStrategy(std::vector<std::string> checked, const MirroredOptions& options, int);

  MirroredOptions options_;
  bool on_gpus_ = false;
  std::vector<std::unique_ptr<GradientAggregator>> aggregators_;  // one per replica (none for one CPU replica)
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
  static constexpr int64_t kBucketBytes = 256 << 10;
  std::vector<std::unique_ptr<GradientAggregator>> aggregators_;  // one per replica (none for one replica)
};

// A strategy by its CLI name: "one_device" (or "default"), "mirrored", "central_storage", with `replicas`
// CPU replicas (ignored for one_device). InvalidArgument lists the choices.
std::unique_ptr<Strategy> make_strategy(const std::string& name, int replicas = 1,
                                        const std::string& cross_device_ops = kDefaultCrossDeviceOps);

}  // namespace strata::distribute
