// broadcast_state_from_chief (worker_state.h): one broadcast per dtype of the weights, then of the optimizer state.
// Thread-safety: fit's driving thread.
#include "train/worker_state.h"

#include "strata/distribute/strategy.h"
#include "strata/optim/optimizer.h"

namespace strata::detail {

int64_t broadcast_state_from_chief(Model& model) {
  const distribute::Strategy* strategy = model.owning_strategy();
  if (strategy == nullptr || strategy->num_workers() == 1) return 0;
  int64_t bytes = 0;
  // One broadcast per dtype (a collective moves one dtype), in the same order on every worker.
  auto broadcast = [&](const std::vector<Tensor>& tensors) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
      std::vector<Tensor> group;
      for (const Tensor& t : tensors) {
        if (t.dtype() == dtype) group.push_back(t);
      }
      for (const Tensor& t : group) bytes += static_cast<int64_t>(t.nbytes());
      strategy->broadcast_from_chief(group);
    }
  };
  const std::vector<Variable> vars = model.variables();
  std::vector<Tensor> weights;
  for (const Variable& v : vars) weights.push_back(v.component(0));
  broadcast(weights);
  for (const Variable& v : vars) {
    for (int c = 1; c < v.num_components(); ++c) {
      Tensor copy = v.component(c);  // shares the component's storage
      copy.copy_(v.component(0));
    }
  }
  if (!model.compiled()) return bytes;
  const std::vector<Variable> trainable = model.trainable_variables();
  std::vector<std::pair<std::string, Tensor>> state = model.optimizer().state(trainable);
  std::vector<Tensor> tensors;
  for (auto& [name, t] : state) tensors.push_back(t);
  broadcast(tensors);
  model.optimizer().load_state(state, trainable);
  return bytes;
}

}  // namespace strata::detail
