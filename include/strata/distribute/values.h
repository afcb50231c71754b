// Distributed values: what Strategy::run takes and returns (tf.distribute.DistributedValues).
//
//   PerReplica<Tensor> losses = strategy.run(step, dist_batch);   // one value per replica
//   Tensor total = strategy.reduce(ReduceOp::kSum, losses);
//
// PerReplica holds one value per replica, in replica order. Mirrored marks values known to be equal on
// every replica (what an all-reduce gives). Arguments of run that are PerReplica are unpacked, one
// value to each replica; any other argument is passed to every replica as it is.
//
// Thread-safety: values; replicas read only their own entry while run is in progress.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/error.h"

namespace strata::distribute {

// How a cross-replica reduction combines values (tf.distribute.ReduceOp).
enum class ReduceOp { kSum, kMean };
const char* reduce_op_name(ReduceOp op);

template <class T>
class PerReplica {
 public:
  using value_type = T;
  PerReplica() = default;
  explicit PerReplica(std::vector<T> values) : values_(std::move(values)) {}

  int num_replicas() const { return static_cast<int>(values_.size()); }
  const T& operator[](int replica) const { return values_.at(check(replica)); }
  T& operator[](int replica) { return values_.at(check(replica)); }
  // The values in replica order (tf's experimental_local_results).
  const std::vector<T>& values() const { return values_; }
  auto begin() const { return values_.begin(); }
  auto end() const { return values_.end(); }

 private:
  size_t check(int replica) const {
    STRATA_CHECK(replica >= 0 && replica < num_replicas(), InvalidArgument,
                 "PerReplica: replica " << replica << " of " << num_replicas());
    return static_cast<size_t>(replica);
  }
  std::vector<T> values_;
};

// A PerReplica whose values are equal on every replica.
template <class T>
class Mirrored : public PerReplica<T> {
 public:
  using PerReplica<T>::PerReplica;
};

template <class T>
const std::vector<T>& experimental_local_results(const PerReplica<T>& value) {
  return value.values();
}

template <class T>
struct is_per_replica : std::false_type {};
template <class T>
struct is_per_replica<PerReplica<T>> : std::true_type {};
template <class T>
struct is_per_replica<Mirrored<T>> : std::true_type {};

}  // namespace strata::distribute
