// The result of a closure scheduled on a ClusterCoordinator (TensorFlow's RemoteValue): fetch() waits for it and
// returns the function's result bytes, or rethrows the error the function threw on its worker (the same strata type,
// its message naming the worker, the function and the step), or the Unavailable of a closure no worker could run.
// Thread-safety: a RemoteValue is a cheap shared handle; copies may be used from any threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace strata::ps {
namespace detail {
struct RemoteValueState;
}

class RemoteValue {
 public:
  RemoteValue() = default;  // of no closure: fetch() and is_ready() are InvalidArgument
  explicit RemoteValue(std::shared_ptr<detail::RemoteValueState> state);

  // Blocks until the closure finished; its result bytes, or its error rethrown.
  std::string fetch() const;
  // Whether the closure finished (with a result or an error).
  bool is_ready() const;
  // The closure's step id (kept when it is re-run on another worker).
  int64_t step_id() const;

 private:
  std::shared_ptr<detail::RemoteValueState> state_;
};

}  // namespace strata::ps
