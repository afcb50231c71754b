// ParameterServerStrategy's step runners (step_runners.h): the chief schedules, a worker serves.
// Thread-safety: see step_runners.h.
#include "ps/step_runners.h"

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <future>
#include <memory>
#include <mutex>

#include "strata/distribute/input.h"
#include "strata/error.h"
#include "strata/nn/layer.h"
#include "strata/ps/remote_trainer.h"
#include "strata/ps/worker_server.h"

namespace strata::ps {

namespace {

// The output of one scheduled step; an unreachable ps is named by its task. A ps that was reached but did not answer
// within the workers' ps timeout (Timeout, as every strata RPC's deadline) is lost as well: fit fails with
// Unavailable naming it, as for a ps that is down.
StepOutput fetch_step(const ParameterServerStrategy& strategy, const RemoteValue& step, int64_t epoch, size_t index) {
  try {
    return StepOutput::parse(step.fetch());
  } catch (const Error& e) {
    const std::string what = e.what();
    if (e.code() != ErrorCode::kUnavailable && e.code() != ErrorCode::kDeadlineExceeded) {
      // The step's own failure (a refused push, a bad batch): where in the fit it happened.
      throw_error(e.code(), "fit: epoch " + std::to_string(epoch + 1) + ", step " + std::to_string(index + 1) +
                                " failed: " + what);
    }
    for (const std::string& address : strategy.ps_addresses()) {
      if (what.find(address) != std::string::npos) {
        STRATA_THROW(Unavailable, "fit: " << strategy.describe_ps(address) << " is unavailable (epoch " << epoch + 1
                                          << ", step " << index + 1 << "): " << what);
      }
    }
    throw;
  }
}

// Whether `e` may be a ps's refusal to serve a state it lost (fenced, or a shard it no longer holds), which the ps
// tasks are then asked about; a ps that cannot be reached (Unavailable, Timeout) is not asked again.
bool ps_refusal(const Error& e) {
  return e.code() != ErrorCode::kUnavailable && e.code() != ErrorCode::kDeadlineExceeded;
}

}  // namespace

void CoordinatorStepRunner::begin_fit(distribute::FitPosition& resume, bool requested) {
  STRATA_CHECK(!requested, InvalidArgument,
               "fit: resuming the chief from a model checkpoint is not supported under ParameterServerStrategy; the "
               "job continues from its ps checkpoint (ParameterServerStrategyOptions::resume)");
  group_ = strategy_.join_worker_group();
  if (group_) {
    group_->client()->set_on_lost([](const cluster::LostTask& lost) {
      std::fflush(stdout);
      std::fprintf(stderr, "fit: %s was lost (%s); its steps go to the other workers until it is back\n",
                   lost.task.c_str(), lost.reason.c_str());
    });
  }
  const std::shared_ptr<optim::Optimizer> optimizer = program_.compiled_optimizer();
  for (const Variable& v : ps_variables_of(program_)) initial_values_.push_back(v.value().clone());
  variables_ = create_model_variables(program_, strategy_.partitioner(), strategy_.servers(),
                                      optimizer_spec_of(*optimizer));
  bool restarted = false;
  for (const auto& s : strategy_.ps_stats()) restarted = restarted || s.fenced_at > 0;
  if (strategy_.options().resume || restarted) {
    // Every ps back to the committed checkpoint (those restarted from it only lift their fence), fit from there.
    strategy_.restore_ps_checkpoint();
    resumed_ = strategy_.committed_position();
    resume.epochs_done = resumed_.epochs_done;
    resume.step_in_epoch = resumed_.step_in_epoch;
    // The epoch's running metrics start again from zero (the steps before the checkpoint are not in the logs).
    resume.metric_states = program_.tracker_states();
    for (auto& state : resume.metric_states) std::fill(state.begin(), state.end(), 0.0);
    steps_done_ = checkpointed_at_ = resumed_.step;
    std::fflush(stdout);
    std::fprintf(stderr, "fit: the job resumes from its ps checkpoint %lld, at step %lld (epoch %lld, step %lld)\n",
                 static_cast<long long>(strategy_.committed_checkpoint()), static_cast<long long>(resumed_.step),
                 static_cast<long long>(resumed_.epochs_done + 1), static_cast<long long>(resumed_.step_in_epoch));
  }
  remember_shards();
  // Workers still starting would count as lost and miss the first steps (under max_staleness = 0, the first rounds).
  for (const std::string& why : strategy_.wait_for_workers(strategy_.options().coordinator.unavailable_timeout)) {
    std::fflush(stdout);
    std::fprintf(stderr, "fit: training without %s until it comes up\n", why.c_str());
  }
}

void CoordinatorStepRunner::begin_epoch(int64_t epoch, int64_t steps_left) {
  epoch_ = epoch;
  step_in_epoch_ = epoch == resumed_.epochs_done ? resumed_.step_in_epoch : 0;
  scheduled_.clear();
  fetched_ = 0;
  epoch_states_.clear();
  ClusterCoordinator& coordinator = strategy_.coordinator();
  scheduled_.reserve(static_cast<size_t>(steps_left));
  for (int64_t i = 0; i < steps_left; ++i) scheduled_.push_back(coordinator.schedule(kTrainStep, step_input()));
}

std::string CoordinatorStepRunner::step_input() const {
  return StepInput{.learning_rate = program_.compiled_optimizer()->learning_rate()}.serialize();
}

void CoordinatorStepRunner::run_steps(const distribute::StepGroup& steps) {
  for (size_t k = 0; k < steps.size(); ++k) {
    STRATA_CHECK(fetched_ < scheduled_.size(), Error, "fit: more steps asked of the coordinator than were scheduled");
    const size_t index = fetched_;
    StepOutput out;
    try {
      out = fetch_step(strategy_, scheduled_[index], epoch_, index);
    } catch (const Error& e) {
      const std::vector<std::string> lost = ps_refusal(e) ? ps_that_lost_state() : std::vector<std::string>{};
      if (lost.empty()) throw;
      roll_back(lost);  // this step and those after it are scheduled again
      --k;
      continue;
    }
    ++fetched_;
    // The epoch's logs are those of the steps back so far, in the order they were scheduled.
    epoch_states_ = epoch_states_.empty() ? out.metric_states
                                          : sum_metric_states({StepOutput{0, epoch_states_}, out});
    program_.set_tracker_states(epoch_states_);
    ++steps_done_;
    ++step_in_epoch_;
  }
}

void CoordinatorStepRunner::remember_shards() {
  shards_given_.clear();
  for (const auto& s : strategy_.ps_stats()) shards_given_.push_back(s.shards);
}

std::vector<std::string> CoordinatorStepRunner::ps_that_lost_state() {
  std::vector<ParameterServerClient::Stats> stats;
  try {
    stats = strategy_.ps_stats();
  } catch (const Error&) {
    return {};  // a ps that cannot be asked: the caller's error says more
  }
  std::vector<std::string> lost;
  for (size_t i = 0; i < stats.size(); ++i) {
    const std::string who = strategy_.describe_ps(strategy_.ps_addresses()[i]);
    if (stats[i].fenced_at > 0) {
      lost.push_back(who + " restarted from checkpoint " + std::to_string(stats[i].fenced_at));
    } else if (stats[i].shards < shards_given_[i]) {
      lost.push_back(who + " restarted with " + std::to_string(stats[i].shards) + " of its " +
                     std::to_string(shards_given_[i]) + " shards");
    }
  }
  return lost;
}

void CoordinatorStepRunner::roll_back(const std::vector<std::string>& lost) {
  // Every step still out ends first: those after the loss fail at the restarted ps (or are undone below).
  for (size_t j = fetched_; j < scheduled_.size(); ++j) {
    try {
      scheduled_[j].fetch();
    } catch (const Error&) {
    }
  }
  std::string who;
  for (const std::string& l : lost) who += (who.empty() ? "" : "; ") + l;
  PsJobPosition to;
  std::string from;
  if (strategy_.committed_checkpoint() > 0) {
    strategy_.restore_ps_checkpoint();
    to = strategy_.committed_position();
    from = "ckpt-" + std::to_string(strategy_.committed_checkpoint());
  } else {
    // No checkpoint yet: every variable as it was made, on every ps (the restarted one holds none of them).
    STRATA_CHECK(!strategy_.replicating(), Unavailable,
                 "fit: " << who << ", and the job has no checkpoint to roll back to");
    const OptimizerSpec optimizer = optimizer_spec_of(*program_.compiled_optimizer());
    const size_t trainable = variables_.size() - model_states(program_).size();  // the states follow
    for (size_t v = 0; v < variables_.size(); ++v) {
      variables_[v].replace(initial_values_[v], v < trainable ? optimizer : kStateUpdate);
    }
    from = "the initial values";
  }
  remember_shards();
  // The checkpoint may hold steps that finished before it was written but were not back here yet (negative): those
  // keep their outputs, and the epoch's steps after them run again.
  const int64_t undone = steps_done_ - to.step;
  const int64_t again = std::max<int64_t>(undone, 0);
  strategy_.count_rollback(again);
  std::fflush(stdout);
  std::fprintf(stderr, "fit: %s; the job rolled back to step %lld (%s), and runs the %lld steps since again\n",
               who.c_str(), static_cast<long long>(to.step), from.c_str(), static_cast<long long>(again));
  if (undone >= 0) {
    steps_done_ = to.step;
    run_steps_now(undone);
  }
  // The epoch's steps not back yet failed at the ps, or were undone: they run again.
  ClusterCoordinator& coordinator = strategy_.coordinator();
  const size_t kept = fetched_ + static_cast<size_t>(std::max<int64_t>(-undone, 0));
  for (size_t j = kept; j < scheduled_.size(); ++j) scheduled_[j] = coordinator.schedule(kTrainStep, step_input());
}

void CoordinatorStepRunner::run_steps_now(int64_t count) {
  ClusterCoordinator& coordinator = strategy_.coordinator();
  std::vector<RemoteValue> again;
  for (int64_t i = 0; i < count; ++i) again.push_back(coordinator.schedule(kTrainStep, step_input()));
  for (size_t i = 0; i < again.size(); ++i) {
    try {
      fetch_step(strategy_, again[i], epoch_, fetched_);
      ++steps_done_;
    } catch (const Error& e) {
      const std::vector<std::string> lost = ps_refusal(e) ? ps_that_lost_state() : std::vector<std::string>{};
      if (lost.empty()) throw;
      for (size_t j = i + 1; j < again.size(); ++j) {
        try {
          again[j].fetch();
        } catch (const Error&) {
        }
      }
      const int64_t still = steps_done_ + static_cast<int64_t>(again.size() - i);
      roll_back(lost);  // runs what it undid
      run_steps_now(still - steps_done_);
      return;
    }
  }
}

void CoordinatorStepRunner::with_rollback(const std::function<void()>& action) {
  for (int attempt = 0;; ++attempt) {
    try {
      action();
      return;
    } catch (const Error& e) {
      const std::vector<std::string> lost =
          attempt < 3 && ps_refusal(e) ? ps_that_lost_state() : std::vector<std::string>{};
      if (lost.empty()) throw;
      roll_back(lost);
    }
  }
}

namespace {
// Holds a coordinator paused (ClusterCoordinator::pause) for its lifetime.
class PausedCoordinator {
 public:
  explicit PausedCoordinator(ClusterCoordinator& coordinator) : coordinator_(coordinator) { coordinator_.pause(); }
  ~PausedCoordinator() { coordinator_.resume(); }
  PausedCoordinator(const PausedCoordinator&) = delete;
  PausedCoordinator& operator=(const PausedCoordinator&) = delete;

 private:
  ClusterCoordinator& coordinator_;
};
}  // namespace

void CoordinatorStepRunner::save_checkpoint_mid_epoch() {
  with_rollback([&] {
    // The workers run ahead of the steps back here: no step may be half applied when the ps save, so none runs
    // meanwhile, and those that finished count in the checkpoint.
    PausedCoordinator paused(strategy_.coordinator());
    size_t finished = fetched_;
    while (finished < scheduled_.size() && scheduled_[finished].is_ready()) ++finished;
    const auto ahead = static_cast<int64_t>(finished - fetched_);
    strategy_.save_ps_checkpoint(
        {.step = steps_done_ + ahead, .epochs_done = epoch_, .step_in_epoch = step_in_epoch_ + ahead});
  });
  checkpointed_at_ = steps_done_;
}

void CoordinatorStepRunner::end_group() {
  const int64_t every = strategy_.options().checkpoint_dir.empty() ? 0 : strategy_.options().checkpoint_every_steps;
  if (every > 0 && steps_done_ / every != checkpointed_at_ / every) {  // a multiple of `every` passed in the group
    save_checkpoint_mid_epoch();
  }
}

void CoordinatorStepRunner::end_epoch(bool stopped) {
  if (stopped) strategy_.coordinator().join();  // the steps scheduled after the one that stopped still run
  // validation, callbacks and evaluate see the trained weights
  with_rollback([&] { pull_model_variables(program_, variables_); });
  trained_.clear();  // what a callback may change (write_back_changed_weights)
  for (const Variable& v : ps_variables_of(program_)) trained_.push_back(v.value().clone());
  if (!strategy_.options().checkpoint_dir.empty()) {  // every step of the epoch is back: none runs
    with_rollback([&] { strategy_.save_ps_checkpoint({.step = steps_done_, .epochs_done = epoch_ + 1}); });
    checkpointed_at_ = steps_done_;
  }
}

void CoordinatorStepRunner::write_back_changed_weights() {
  if (trained_.empty()) return;  // no epoch ended
  const std::vector<Variable> vars = ps_variables_of(program_);
  std::vector<size_t> changed;
  for (size_t i = 0; i < vars.size(); ++i) {
    const Tensor& now = vars[i].value();
    const Tensor& pulled = trained_[i];
    if (now.shape() != pulled.shape() || now.dtype() != pulled.dtype() ||
        std::memcmp(now.raw_data(), pulled.raw_data(), now.nbytes()) != 0) {
      changed.push_back(i);
    }
  }
  trained_.clear();
  if (changed.empty()) return;
  const OptimizerSpec optimizer = optimizer_spec_of(*program_.compiled_optimizer());
  const size_t trainable = variables_.size() - model_states(program_).size();  // the states follow
  with_rollback([&] {
    for (const size_t i : changed) {
      variables_[i].assign(vars[i].value(), i < trainable ? optimizer : kStateUpdate);
    }
  });
  std::string saved;
  if (!strategy_.options().checkpoint_dir.empty()) {
    with_rollback([&] { strategy_.save_ps_checkpoint({.step = steps_done_, .epochs_done = epoch_ + 1}); });
    checkpointed_at_ = steps_done_;
    saved = " and saved as ps checkpoint " + std::to_string(strategy_.committed_checkpoint());
  }
  std::fflush(stderr);
  std::printf("fit: a callback changed %zu of the chief's %zu variables after the last epoch (EarlyStopping's "
              "restore_best_weights): written back to the ps tasks%s\n",
              changed.size(), vars.size(), saved.c_str());
  std::fflush(stdout);
}

void CoordinatorStepRunner::end_fit() {
  write_back_changed_weights();
  // A worker that does not answer (down, restarting) is reported, not waited for.
  for (const std::string& failed : strategy_.run_on_every_worker(kEndFit, std::chrono::seconds(10))) {
    // "worker:1 (127.0.0.1:2223): UNAVAILABLE: ..." -> "could not tell worker:1 (127.0.0.1:2223) that training
    // ended: UNAVAILABLE: ..."
    const size_t split = failed.find("): ");
    const std::string who = split == std::string::npos ? failed : failed.substr(0, split + 1);
    const std::string why = split == std::string::npos ? "" : ": " + failed.substr(split + 3);
    std::fflush(stdout);
    std::fprintf(stderr, "fit: could not tell %s that training ended%s\n", who.c_str(), why.c_str());
  }
}

std::optional<int64_t> WorkerStepRunner::serve(const data::Dataset& dataset) {
  STRATA_CHECK(strategy_.task_type() == "worker", InvalidArgument,
               "fit: " << strategy_.task().name()
                       << " is a ps task: it serves variables (ParameterServerStrategy::join) and trains nothing");
  const nn::Layer& model = program_.program_layer();
  STRATA_CHECK(model.built(), InvalidArgument,
               "fit: a parameter-server worker attaches to the chief's variables by shape: build model '"
                   << model.name() << "' (build_for) before fit");
  // The trainer attaches to the chief's variables at the first step: by then the chief has made them. (A WorkerServer
  // runs one function at a time, so the first step makes it alone; after stop() no function runs.)
  const std::shared_ptr<distribute::TrainingProgram> program(&program_, [](distribute::TrainingProgram*) {});
  const std::vector<std::shared_ptr<ParameterServerClient>>& servers = strategy_.servers();
  std::unique_ptr<RemoteTrainer> trainer;
  std::promise<void> ended;
  std::once_flag end_once;
  // The worker group (heartbeats, the job's fingerprint) is joined once the server answers: the chief pings the
  // workers before its fit serves the group. Steps wait until it is joined, and the first compares the fingerprints
  // again, the chief's certainly among them by then. Declared before the server, so it outlives the steps.
  std::unique_ptr<cluster::WorkerGroup> group;
  std::promise<void> joined_promise;
  const std::shared_future<void> joined = joined_promise.get_future().share();
  std::once_flag compared;
  WorkerServer server;
  server.register_function(kTrainStep, [&](const StepContext& step, const std::string& args) {
    joined.get();  // rethrows what ended the join
    if (group) std::call_once(compared, [&] { group->check_fingerprints(); });
    if (!trainer) {
      trainer = std::make_unique<RemoteTrainer>(
          program, [&dataset](int64_t) { return dataset; }, strategy_.task_index(), strategy_.partitioner(), servers);
    }
    // With its synchronous round under max_staleness = 0, at the chief's learning rate.
    return trainer->run_step(step, StepInput::parse(args)).serialize();
  });
  server.register_function(kEndFit, [&](int64_t, const std::string&) {
    std::call_once(end_once, [&] { ended.set_value(); });
    return std::string();
  });
  server.start(strategy_.task().address, strategy_.options().max_message_bytes);
  // The chief gone (its process, or the group's service with it) ends the wait: serving on would wait forever.
  auto chief_gone = std::make_shared<std::promise<std::string>>();
  std::future<std::string> gone = chief_gone->get_future();
  try {
    group = strategy_.join_worker_group();
  } catch (...) {
    joined_promise.set_exception(std::current_exception());
    throw;
  }
  joined_promise.set_value();
  if (group) {
    group->client()->set_on_lost([chief_gone, once = std::make_shared<std::once_flag>()](const cluster::LostTask& lost) {
      if (lost.task.rfind("chief:", 0) != 0 && lost.task.rfind("coordination service", 0) != 0) return;
      std::call_once(*once, [&] { chief_gone->set_value(lost.task + " is gone (" + lost.reason + ")"); });
    });
  }
  std::future<void> end = ended.get_future();
  while (end.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (gone.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      group->client()->set_on_lost(nullptr);
      STRATA_THROW(Unavailable, "fit: " << strategy_.task().name() << " stops serving: " << gone.get()
                                        << "; training cannot go on without the chief");
    }
  }
  if (group) group->client()->set_on_lost(nullptr);
  server.stop();
  return trainer ? trainer->steps_run() : 0;
}

void WorkerStepRunner::run_steps(const distribute::StepGroup&) {
  STRATA_THROW(Error, "fit: a parameter-server worker serves the chief's steps; it runs none of its own");
}

std::unique_ptr<distribute::StepRunner> ParameterServerStrategy::make_step_runner(
    distribute::TrainingProgram& program) {
  if (is_chief()) return std::make_unique<CoordinatorStepRunner>(*this, program);
  return std::make_unique<WorkerStepRunner>(*this, program);
}

}  // namespace strata::ps
