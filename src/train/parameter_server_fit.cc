// Model::fit under a ParameterServerStrategy (strata/ps/parameter_server_strategy.h). The chief creates the model's
// variables on the ps tasks, schedules each epoch's steps through the coordinator and folds the steps' loss and
// metric states into its own trackers; a worker serves the training step (a ps::RemoteTrainer) on its own input until
// the chief's fit ends.
// Thread-safety: as Model::fit (one driving thread); on a worker the step runs on the server's thread while the
// driving thread waits for the end of the fit.
#include <cstdio>
#include <future>
#include <memory>
#include <mutex>

#include "strata/error.h"
#include "strata/ps/parameter_server_strategy.h"
#include "strata/train/model.h"
#include "strata/train/remote_trainer.h"
#include "train/run_callbacks.h"

namespace strata {

namespace {

using detail::run_callbacks;

// The output of one scheduled step; an unreachable ps is named by its task. A ps that was reached but did not answer
// within the workers' ps timeout (Timeout, as every strata RPC's deadline) is lost as well: fit fails with
// Unavailable naming it, as for a ps that is down.
ps::StepOutput fetch_step(const ps::ParameterServerStrategy& strategy, const ps::RemoteValue& step, int64_t epoch,
                          int64_t index) {
  try {
    return ps::StepOutput::parse(step.fetch());
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnavailable && e.code() != ErrorCode::kDeadlineExceeded) throw;
    const std::string what = e.what();
    for (const std::string& address : strategy.ps_addresses()) {
      if (what.find(address) != std::string::npos) {
        STRATA_THROW(Unavailable, "fit: " << strategy.describe_ps(address) << " is unavailable (epoch " << epoch + 1
                                          << ", step " << index + 1 << "): " << what);
      }
    }
    throw;
  }
}

// Stops the workers' fit; a worker that does not answer (down, restarting) is reported, not waited for.
void end_workers_fit(ps::ParameterServerStrategy& strategy) {
  for (const std::string& why : strategy.run_on_every_worker(ps::kEndFit, std::chrono::seconds(10))) {
    std::fflush(stdout);
    std::fprintf(stderr, "fit: could not tell %s that training ended\n", why.c_str());
  }
}

}  // namespace

History Model::fit_as_coordinator(ps::ParameterServerStrategy& strategy, const data::Dataset& dataset,
                                  const FitOptions& options) {
  STRATA_CHECK(built(), InvalidArgument,
               "fit: under ParameterServerStrategy the chief reads no batch to build model '"
                   << name() << "' from: build it (build_for) before fit");
  int64_t steps_per_epoch = options.steps_per_epoch;
  if (steps_per_epoch == 0) {
    const int64_t cardinality = dataset.cardinality();
    STRATA_CHECK(cardinality > 0, InvalidArgument,
                 "fit: under ParameterServerStrategy give steps_per_epoch (as TensorFlow requires): the dataset's "
                 "size is "
                     << (cardinality == data::Dataset::kInfinite ? "infinite" : "unknown"));
    steps_per_epoch = cardinality;
  }
  const std::vector<std::shared_ptr<Callback>> callbacks = fit_callbacks(options, steps_per_epoch);
  const ActiveFit active = start_fit();
  History history;
  run_callbacks(callbacks, [](Callback& cb) { cb.on_train_begin(Logs()); });
  STRATA_CHECK(!resume_, InvalidArgument,
               "fit: resuming the chief from a checkpoint is not supported under ParameterServerStrategy; its "
               "checkpoint_dir keeps the ps shards, which a restarted ps task restores by itself");

  const std::vector<ps::ShardedVariable> variables = ps::create_model_variables(
      *this, strategy.partitioner(), strategy.servers(), ps::optimizer_spec_of(optimizer()));
  // Workers still starting would count as lost and miss the first steps (under max_staleness = 0, the first rounds).
  for (const std::string& why : strategy.wait_for_workers(strategy.options().coordinator.unavailable_timeout)) {
    std::fflush(stdout);
    std::fprintf(stderr, "fit: training without %s until it comes up\n", why.c_str());
  }
  ps::ClusterCoordinator& coordinator = strategy.coordinator();
  const bool checkpoints = !strategy.options().checkpoint_dir.empty();
  const int64_t save_every = checkpoints ? strategy.options().checkpoint_every_steps : 0;
  int64_t steps_done = 0;
  for (int64_t epoch = options.initial_epoch; epoch < options.epochs && !stop_training; ++epoch) {
    reset_metrics();
    fit_state_.epochs_done = epoch;
    fit_state_.step_in_epoch = 0;
    run_callbacks(callbacks, [&](Callback& cb) { cb.on_epoch_begin(epoch, Logs()); });
    std::vector<ps::RemoteValue> steps;
    steps.reserve(static_cast<size_t>(steps_per_epoch));
    for (int64_t i = 0; i < steps_per_epoch; ++i) steps.push_back(coordinator.schedule(ps::kTrainStep));
    // The epoch's logs are those of the steps back so far, in the order they were scheduled.
    ps::StepOutput sum;
    for (int64_t i = 0; i < steps_per_epoch; ++i) {
      run_callbacks(callbacks, [&](Callback& cb) { cb.on_train_batch_begin(i, Logs()); });
      const ps::StepOutput out = fetch_step(strategy, steps[static_cast<size_t>(i)], epoch, i);
      sum.metric_states = i == 0 ? out.metric_states : ps::sum_metric_states({sum, out});
      set_tracker_states(sum.metric_states);
      fit_state_.step_in_epoch = i + 1;
      ++steps_done;
      if (save_every > 0 && steps_done % save_every == 0) strategy.save_ps_checkpoint();
      const Logs logs = metric_logs();
      run_callbacks(callbacks, [&](Callback& cb) { cb.on_train_batch_end(i, logs); });
      if (stop_training) break;
    }
    if (stop_training) coordinator.join();  // the steps scheduled after the one that stopped still run
    ps::pull_model_variables(*this, variables);  // validation, callbacks and evaluate see the trained weights
    Logs logs = metric_logs();
    if (options.validation_data && !stop_training) {
      const Logs val = evaluate(*options.validation_data, {.steps = options.validation_steps});
      for (const auto& [k, v] : val.items()) logs.set("val_" + k, v);
    }
    if (checkpoints) strategy.save_ps_checkpoint();
    history.epochs.push_back(epoch);
    for (const auto& [k, v] : logs.items()) history.history[k].push_back(v);
    history.input_wait_fraction.push_back(0);  // the chief reads no input
    fit_state_.epochs_done = epoch + 1;
    fit_state_.step_in_epoch = 0;
    run_callbacks(callbacks, [&](Callback& cb) { cb.on_epoch_end(epoch, logs); });
  }
  run_callbacks(callbacks, [](Callback& cb) { cb.on_train_end(Logs()); });
  end_workers_fit(strategy);
  return history;
}

History Model::fit_as_worker(ps::ParameterServerStrategy& strategy, const data::Dataset& dataset) {
  STRATA_CHECK(strategy.task_type() == "worker", InvalidArgument,
               "fit: " << strategy.task().name()
                       << " is a ps task: it serves variables (ParameterServerStrategy::join) and trains nothing");
  STRATA_CHECK(built(), InvalidArgument,
               "fit: a parameter-server worker attaches to the chief's variables by shape: build model '"
                   << name() << "' (build_for) before fit");
  // The trainer attaches to the chief's variables at the first step: by then the chief has made them. (A WorkerServer
  // runs one function at a time, so the first step makes it alone; after stop() no function runs.)
  const std::shared_ptr<Model> self(this, [](Model*) {});
  const std::vector<std::shared_ptr<ps::ParameterServerClient>>& servers = strategy.servers();
  std::unique_ptr<ps::RemoteTrainer> trainer;
  std::promise<void> ended;
  std::once_flag end_once;
  ps::WorkerServer server;
  server.register_function(ps::kTrainStep, [&](const ps::StepContext& step, const std::string&) {
    if (!trainer) {
      trainer = std::make_unique<ps::RemoteTrainer>(
          self, [&dataset](int64_t) { return dataset; }, strategy.task_index(), strategy.partitioner(), servers);
    }
    return trainer->run_step(step).serialize();  // with its synchronous round under max_staleness = 0
  });
  server.register_function(ps::kEndFit, [&](int64_t, const std::string&) {
    std::call_once(end_once, [&] { ended.set_value(); });
    return std::string();
  });
  server.start(strategy.task().address);
  ended.get_future().wait();
  server.stop();
  History served;
  if (trainer) served.steps_served = trainer->steps_run();
  return served;
}

}  // namespace strata
