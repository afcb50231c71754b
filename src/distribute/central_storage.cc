// CentralStorageStrategy: one copy of every variable on the host; replicas compute on it in parallel,
// their gradients are summed once and the update runs once, inside merge_call, while they wait.
// Thread-safety: replicas only post their gradients; the sum and the update run on one thread (with
// every core) while the others wait in merge_call.
#include <algorithm>
#include <unordered_map>

#include "autograd/sum_in_order.h"
#include "distribute/devices.h"
#include "strata/distribute/strategies.h"
#include "strata/threading.h"

namespace strata::distribute {

struct CentralStorageStrategy::Shared {
  std::vector<std::vector<Tensor>> grads;     // per replica, this step's gradients
  std::unordered_map<uint64_t, Tensor> sums;  // per variable id: the buffer its summed gradient goes to
};

class CentralStorageStrategy::Aggregator final : public GradientAggregator {
 public:
  Aggregator(CentralStorageStrategy& strategy, int replica) : strategy_(strategy), replica_(replica) {}

  void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                       GradientApplier& applier) override {
    for (const Variable& v : vars) {
      STRATA_CHECK(v.owner() == strategy_.id(), InvalidArgument,
                   strategy_.name() << ".apply_gradients: variable '" << v.name()
                                    << "' was not created inside this strategy's scope");
    }
    Shared& shared = *strategy_.shared_;
    shared.grads[static_cast<size_t>(replica_)] = grads;
    strategy_.merge_call(replica_, [&] {
      const auto summed = sum_over_replicas(shared, vars);
      if (!applier.prepared(vars)) applier.prepare(vars);
      applier.update(summed, vars);
      applier.finish();
    });
  }

 private:
  // Gradient i summed over the replicas (undefined where no replica has one), in buffers reused per step.
  static std::vector<Tensor> sum_over_replicas(Shared& shared, const std::vector<Variable>& vars) {
    std::vector<Tensor> out(vars.size());
    for (size_t i = 0; i < vars.size(); ++i) {
      std::vector<const float*> parts;
      for (const auto& replica_grads : shared.grads) {
        STRATA_CHECK(replica_grads.size() == vars.size(), InvalidArgument,
                     "CentralStorageStrategy: replicas passed different numbers of gradients");
        if (replica_grads[i].defined()) parts.push_back(replica_grads[i].data<float>());
      }
      if (parts.empty()) continue;
      Tensor& sum = shared.sums[vars[i].id()];
      if (!sum.defined() || sum.shape() != vars[i].shape()) sum = Tensor::empty(vars[i].shape());
      float* dst = sum.data<float>();
      parallel_for(0, sum.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
        strata::detail::sum_in_order(parts, begin, end - begin, dst + begin);
      });
      out[i] = sum;
    }
    for (auto& g : shared.grads) g.clear();
    return out;
  }

  CentralStorageStrategy& strategy_;
  int replica_;
};

CentralStorageStrategy::CentralStorageStrategy(std::vector<std::string> devices, int threads_per_replica)
    : Strategy(detail::checked_devices("CentralStorageStrategy", std::move(devices)), threads_per_replica),
      shared_(std::make_unique<Shared>()) {
  shared_->grads.resize(static_cast<size_t>(num_replicas_in_sync()));
  if (num_replicas_in_sync() > 1) {
    for (int r = 0; r < num_replicas_in_sync(); ++r) aggregators_.push_back(std::make_unique<Aggregator>(*this, r));
  }
}

CentralStorageStrategy::~CentralStorageStrategy() = default;

Variable CentralStorageStrategy::create_variable(const Tensor& initial_value, const VariableOptions& options) {
  return make_distributed_variable({initial_value}, options, id());
}

GradientAggregator* CentralStorageStrategy::aggregator(int replica) {
  return aggregators_.empty() ? nullptr : aggregators_[static_cast<size_t>(replica)].get();
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, int replicas, const std::string& cross_device_ops) {
  STRATA_CHECK(replicas >= 1, InvalidArgument, "replicas must be >= 1, got " << replicas);
  if (name == "one_device" || name == "default") return std::make_unique<OneDeviceStrategy>("/cpu:0");
  if (name == "mirrored") {
    return std::make_unique<MirroredStrategy>(MirroredStrategy::cpu_devices(replicas),
                                              MirroredOptions{.cross_device_ops = CrossDeviceOps::from_name(cross_device_ops)});
  }
  if (name == "central_storage") {
    return std::make_unique<CentralStorageStrategy>(MirroredStrategy::cpu_devices(replicas));
  }
  STRATA_THROW(InvalidArgument,
               "unknown strategy '" << name << "'; choose one of one_device, mirrored, central_storage");
}

}  // namespace strata::distribute
