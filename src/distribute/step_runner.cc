// The default step runner (strata/distribute/training_program.h): a group's steps on every local replica in sync,
// and the strategy's defaults for the extension point.
// A replica on a GPU steps on batches a DevicePrefetcher staged there (device_prefetch.h): each batch's copy is queued
// on the GPU's copy stream through a pinned block, the next step's while the current one runs, and the step's kernels
// wait for it on the device, not the host. Replicas on the host step on the batches as they are.
// Thread-safety: run_steps_on_replicas is called by fit's (or evaluate's) thread; the step-rows value is per thread;
// each replica thread has its own prefetcher.
#include "distribute/device_prefetch.h"
#include "strata/distribute/strategy.h"
#include "strata/distribute/training_program.h"

namespace strata::distribute {

namespace {
thread_local int64_t t_step_global_rows = 0;
}  // namespace

int64_t step_global_rows() { return t_step_global_rows; }
ScopedStepRows::ScopedStepRows(int64_t rows) { t_step_global_rows = rows; }
ScopedStepRows::~ScopedStepRows() { t_step_global_rows = 0; }

data::Element batch_on_device(const data::Element& batch, Device device) {
  if (device.is_cpu()) return batch;
  std::vector<Tensor> components;
  components.reserve(batch.components().size());
  for (const Tensor& t : batch.components())
    components.push_back(!t.defined() || t.device() == device ? t : t.to(device));
  return data::Element(std::move(components), batch.shared_names());
}

void run_steps_on_replicas(Strategy& strategy, TrainingProgram& program, const StepGroup& steps, bool training) {
  const auto step = [&](const data::Element& batch) { training ? program.train_step(batch) : program.test_step(batch); };
  if (&strategy == &default_strategy()) {  // one replica, plain variables: no replica machinery
    for (const auto& batches : steps.batches) step(batches[0]);
    return;
  }
  strategy.run_replicas([&](int replica) {
    const Device device = strategy.replica_device(replica);
    if (device.is_cpu()) {
      for (size_t k = 0; k < steps.size(); ++k) {
        ScopedStepRows rows(steps.global_rows[k]);
        step(steps.batches[k][replica]);
      }
      return;
    }
    // A GPU replica: the group's batches go through pinned blocks on the copy stream, one step ahead.
    DevicePrefetcher prefetch(strata::detail::make_device_copy_queue(device));
    run_prefetched(
        prefetch, steps.size(), [&](size_t k) -> const data::Element& { return steps.batches[k][replica]; },
        [&](size_t k, const data::Element& batch) {
          ScopedStepRows rows(steps.global_rows[k]);
          step(batch);
        });
  });
  program.merge_replica_trackers();
}

void ReplicaStepRunner::run_steps(const StepGroup& steps) {
  run_steps_on_replicas(strategy_, program_, steps, /*training=*/true);
}

std::unique_ptr<StepRunner> Strategy::make_step_runner(TrainingProgram& program) {
  return std::make_unique<ReplicaStepRunner>(*this, program);
}

std::optional<double> Strategy::run_train_step(TrainingProgram&, const data::Element&) { return std::nullopt; }

}  // namespace strata::distribute
