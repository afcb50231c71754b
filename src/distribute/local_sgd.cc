// LocalSGDStrategy (strata/distribute/local_sgd.h) and its step runner: local optimizer steps, then one all-reduce of
// the weights every sync_every steps.
// Thread-safety: fit's driving thread (the runner trains on it, outside any replica context, so each worker's step is
// a one-device step on its share of the batch: its loss is its own mean, not a share of the global one).
#include "strata/distribute/local_sgd.h"

#include "strata/error.h"

namespace strata::distribute {

LocalSGDStrategy::LocalSGDStrategy(LocalSGDOptions options, CommunicationOptions communication)
    : LocalSGDStrategy(options, cluster::resolve_cluster_from_environment(), std::move(communication)) {}

LocalSGDStrategy::LocalSGDStrategy(LocalSGDOptions options, const cluster::TaskInfo& task,
                                   CommunicationOptions communication)
    // The options are checked before the workers connect.
    : WorkerGroupStrategy((checked(options), task), std::move(communication), "local_sgd", "LocalSGDStrategy"),
      options_(options) {}

LocalSGDStrategy::~LocalSGDStrategy() = default;

const LocalSGDOptions& LocalSGDStrategy::checked(const LocalSGDOptions& options) {
  STRATA_CHECK(options.sync_every >= 1, InvalidArgument,
               "LocalSGDStrategy: sync_every must be at least 1 (local steps between weight averages), got "
                   << options.sync_every);
  STRATA_CHECK(!options.outer_nesterov || (options.outer_learning_rate > 0 && options.outer_momentum >= 0 &&
                                           options.outer_momentum < 1),
               InvalidArgument,
               "LocalSGDStrategy: the outer step needs outer_learning_rate > 0 and 0 <= outer_momentum < 1, got "
                   << options.outer_learning_rate << " and " << options.outer_momentum);
  return options;
}

std::string LocalSGDStrategy::backend() const { return worker_group() ? worker_group()->backend() : "local"; }

void LocalSGDStrategy::average(const std::vector<Variable>& variables, std::vector<Tensor>& anchor,
                               std::vector<Tensor>& momentum) {
  cluster::WorkerGroup* group = worker_group();
  if (group == nullptr) return;
  std::vector<Tensor> values;
  int64_t bytes = 0;
  for (const Variable& v : variables) {
    STRATA_CHECK(v.dtype() == DType::kFloat32, InvalidArgument,
                 "LocalSGDStrategy: variable '" << v.name() << "' is not float32; only float32 weights are averaged");
    values.push_back(v.value().clone());
    bytes += static_cast<int64_t>(values.back().nbytes());
  }
  if (!values.empty()) {
    comm::AllReduceOptions reduce{.op = comm::ReduceOp::kMean};
    reduce.timeout = communication_options().timeout;
    group->communicator().all_reduce(values, reduce)->wait();
  }
  for (size_t i = 0; i < variables.size(); ++i) {
    Variable v = variables[i];
    const bool outer = options_.outer_nesterov && v.trainable();
    if (!outer) {
      v.assign(values[i]);
      continue;
    }
    // DiLoCo's outer step: delta = anchor - average; m = mu m + delta; anchor -= lr (delta + mu m) (Nesterov).
    STRATA_CHECK(anchor.size() == variables.size() && anchor[i].defined(), InvalidArgument,
                 "LocalSGDStrategy: the outer step needs every variable's value at the last average");
    if (momentum.size() <= i) momentum.resize(i + 1);
    if (!momentum[i].defined()) momentum[i] = Tensor::zeros(values[i].shape());
    float* a = anchor[i].data<float>();
    float* m = momentum[i].data<float>();
    const float* avg = values[i].data<float>();
    const float mu = options_.outer_momentum, lr = options_.outer_learning_rate;
    for (int64_t k = 0; k < values[i].numel(); ++k) {
      const float delta = a[k] - avg[k];
      m[k] = mu * m[k] + delta;
      a[k] -= lr * (delta + mu * m[k]);
    }
    v.assign(anchor[i]);
  }
  ++syncs_;
  sync_bytes_ += bytes;
}

namespace {

// Local steps on fit's thread; every sync_every steps, and at every epoch's end, the weights averaged.
class LocalSGDStepRunner final : public StepRunner {
 public:
  LocalSGDStepRunner(LocalSGDStrategy& strategy, TrainingProgram& program) : strategy_(strategy), program_(program) {}

  // The weights fit starts from (every worker's are the chief's) are where the outer step starts.
  void begin_fit(FitPosition&, bool) override {
    if (!strategy_.options().outer_nesterov) return;
    anchor_.clear();
    for (const Variable& v : float_variables()) anchor_.push_back(v.value().clone());
  }
  void run_steps(const StepGroup& steps) override {
    for (size_t k = 0; k < steps.size(); ++k) {
      program_.train_step(steps.batches[k][0]);  // a one-device step on this worker's share
      if (++since_sync_ == strategy_.options().sync_every) sync();
    }
  }
  void end_epoch(bool) override {
    if (since_sync_ > 0) sync();
  }

 private:
  // Every float32 variable (the trainable ones and states such as BatchNormalization's moving statistics).
  std::vector<Variable> float_variables() const {
    std::vector<Variable> variables;
    for (const Variable& v : program_.program_variables()) {
      if (v.dtype() == DType::kFloat32) variables.push_back(v);
    }
    return variables;
  }
  void sync() {
    strategy_.average(float_variables(), anchor_, momentum_);
    since_sync_ = 0;
  }

  LocalSGDStrategy& strategy_;
  TrainingProgram& program_;
  int since_sync_ = 0;
  std::vector<Tensor> anchor_, momentum_;  // the outer step's, per variable (trainable ones only are used)
};

}  // namespace

std::unique_ptr<StepRunner> LocalSGDStrategy::make_step_runner(TrainingProgram& program) {
  return std::make_unique<LocalSGDStepRunner>(*this, program);
}

}  // namespace strata::distribute
