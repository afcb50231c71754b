// `strata train` and `strata evaluate`: run a job YAML file with no C++ written (see commands.h, job.h).
// Whatever can be checked before training is checked before it starts: the job file, the flags, every
// output path (created, or proven writable), every record of the test set. Settings that run, but badly,
// print a warning on stderr. A run whose loss turns NaN or infinite stops there and fails (TerminateOnNaN).
//
// Thread-safety: registration runs once in main; each command runs on the main thread.

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "cli/checkpoint_loading.h"
#include "cli/commands.h"
#include "cli/core_share.h"
#include "cli/distribution.h"
#include "cli/job.h"
#include "cli/json_log.h"
#include "cli/output_paths.h"
#include "cli/security_flags.h"
#include "cli/trace_flags.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/distribute/strategies.h"
#include "strata/io/checkpoint.h"
#include "strata/nn/policy.h"
#include "strata/parallel/pipeline_strategy.h"
#include "strata/parallel/tensor_parallel_strategy.h"
#include "strata/ps/parameter_server_strategy.h"
#include "strata/ps/remote_trainer.h"
#include "strata/random.h"
#include "strata/threading.h"
#include "strata/train/callbacks.h"

namespace strata::cli {

namespace {

struct TrainArgs {
  std::string job;
  int64_t epochs = 0;
  int64_t batch_size = 0;
  std::string checkpoint_dir;
  bool resume = false;
  int64_t checkpoint_every = 0;    // steps between checkpoints; 0: at each epoch's end only
  std::string backup_dir;          // BackupAndRestore: resumes by itself, deleted when training completes
  int64_t backup_every_steps = 0;  // steps between backups; 0: at each epoch's end only
  std::string csv_log;
  std::string log_dir;              // TensorBoard event files (train/ and validation/ runs)
  int64_t log_every_steps = 0;      // with log_dir: batch scalars every N global steps too (0: epochs only)
  std::string log_format = "text";  // "text": the progress bar; "json": a JSON object per epoch
  std::string trace;                // Chrome trace-event JSON of the steps in trace_steps (cli/trace_flags.h)
  std::string trace_steps;
  int threads = 0;
  int verbose = 1;
  std::string mixed_precision = "float32";  // a dtype policy name (strata/nn/policy.h): float32, bf16, mixed_bfloat16
  StrategyFlags strategy;
  SecurityFlags security;
};

struct EvaluateArgs {
  std::string job;
  std::string checkpoint;
  int64_t batch_size = 0;
  int threads = 0;
  StrategyFlags strategy;
};

// "test loss 0.2512 - test accuracy 0.9134": how every run ends.
void print_test_line(const Logs& logs) {
  std::string line;
  for (const auto& [name, value] : logs.items()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%stest %s %.4f", line.empty() ? "" : " - ", name.c_str(), value);
    line += buf;
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void warn(const std::string& message) {
  if (message.empty()) return;
  std::fflush(stdout);
  std::fprintf(stderr, "strata: warning: %s\n", message.c_str());
}

// What a parameter-server job's messages hold at most: its largest variable (a shard, a gradient, a pull) plus 1 MiB
// for the rest of a message (names, shapes, a step's metric states).
int64_t max_message_bytes(const Job& job) {
  std::shared_ptr<Sequential> model = build_model(job);
  model->build_for(input_shape(job));
  int64_t largest = 0;
  for (const Variable& v : model->variables()) largest = std::max<int64_t>(largest, v.value().nbytes());
  return largest + (int64_t{1} << 20);
}

// The job's strategy (flags over the file), announced on one line with this process's threads and why. Call
// after apply_core_share: replicas and pipeline stages share the process's threads.
std::unique_ptr<distribute::Strategy> open_strategy(Job& job, const StrategyFlags& flags,
                                                    const cluster::CoreShare& cores) {
  job.strategy = resolve_strategy(job.strategy, flags);
  std::unique_ptr<distribute::Strategy> strategy = make_job_strategy(
      job.strategy, job_fingerprint(job), job.strategy.name == "parameter_server" ? max_message_bytes(job) : 0);
  std::printf("%s; %s\n", strategy_line(*strategy, job.batch_size).c_str(), cores.reason.c_str());
  std::fflush(stdout);
  warn(replicas_warning(strategy->num_replicas_in_sync(), static_cast<unsigned>(cores.cores)));
  if (job.strategy.name == "pipeline") warn(stages_warning(job.strategy.pipeline_stages, cores.threads));
  return strategy;
}

namespace fs = std::filesystem;

// Batches in one pass of `dataset`: its cardinality, or counted (e.g. TFRecord files).
int64_t batches_per_pass(const data::Dataset& dataset) {
  int64_t n = dataset.cardinality();
  if (n < 0) {
    n = 0;
    for (data::Iterator it = dataset.make_iterator(); it.next();) ++n;
  }
  return n;
}

// A fit that TerminateOnNaN stopped returns normally: the run is failed here.
void fail_if_fired(const callbacks::TerminateOnNaN& nan) {
  if (!nan.fired()) return;
  const char* loss = std::isnan(nan.loss()) ? "NaN" : nan.loss() > 0 ? "inf" : "-inf";
  STRATA_THROW(Error, "the loss became " << loss << " at epoch " << nan.epoch() + 1 << ", step " << nan.batch() + 1
                                         << "; training stopped (TerminateOnNaN). Lower the learning rate or check "
                                            "the data");
}

// The chief's --log-dir (TensorBoard) and --log-format json callbacks. json replaces the progress bar (fit.verbose
// is set 0 on every worker).
void add_log_callbacks(FitOptions& fit, const TrainArgs& args, bool chief) {
  STRATA_CHECK(args.log_every_steps == 0 || !args.log_dir.empty(), InvalidArgument,
               "--log-every-steps needs --log-dir");
  if (args.log_format == "json") fit.verbose = 0;
  if (!chief) return;
  if (!args.log_dir.empty()) {
    fit.callbacks.push_back(std::make_shared<callbacks::TensorBoard>(
        args.log_dir, callbacks::TensorBoard::Options{.update_freq = args.log_every_steps}));
  }
  if (args.log_format == "json") fit.callbacks.push_back(std::make_shared<JsonEpochLogger>());
}

// The job's validation data and its Keras callbacks (early stopping, best-only checkpoints, learning rate on a
// plateau) on `fit`; every worker runs them (their decisions use the job's logs, alike everywhere) and only the chief
// writes or prints.
void add_job_callbacks(FitOptions& fit, const Job& job) {
  fit.validation_data = validation_dataset(job);
  const std::vector<std::shared_ptr<Callback>> made = make_callbacks(job.callbacks);
  fit.callbacks.insert(fit.callbacks.end(), made.begin(), made.end());
}

// model_checkpoint's directory, made and proven writable before anything runs (the callback checks again when
// training begins).
void check_model_checkpoint_path(const Job& job) {
  if (!job.callbacks.model_checkpoint) return;
  const fs::path directory = fs::path(job.callbacks.model_checkpoint->filepath).parent_path();
  check_output_directory(directory.empty() ? "." : directory.string(), job.file + ": model_checkpoint.filepath");
}

// The job's model, created, compiled and built inside the strategy's scope so that its variables are the
// strategy's (mirrored, or stored once); fit and evaluate then run under that strategy.
std::shared_ptr<Sequential> make_model(const Job& job, distribute::Strategy& strategy, int64_t steps_per_epoch) {
  auto scope = strategy.scope();
  std::shared_ptr<Sequential> model = build_model(job);
  compile_model(job, *model, steps_per_epoch);
  model->build_for(input_shape(job));
  return model;
}

// `strata train --strategy parameter_server` on one task of the cluster (TF_CONFIG, as `strata launch --chief
// --workers N --ps M` gives it): a ps task serves variables until it is stopped; a worker serves training steps on
// its own input (the training set shuffled with a seed of its own) until the chief's fit ends; the chief trains, as
// many steps per epoch as the training set has batches, then evaluates. --checkpoint-dir keeps the ps shards (saved
// by the chief at each epoch's end and every --checkpoint-every steps); a ps task restarted with it restores them.
// The job's callbacks run on the chief: reduce_lr_on_plateau lowers the rate its steps carry to the ps, and
// early_stopping's restore_best_weights has the best weights written back to the ps (src/ps/step_runners.h).
void run_parameter_server_task(Job& job, const TrainArgs& args, const cluster::CoreShare& cores) {
  STRATA_CHECK(job.schedule.name.empty(), InvalidArgument,
               job.file << ": optimizer.schedule: not supported under parameter_server (the ps tasks apply the rate "
                           "the chief's steps carry, which only reduce_lr_on_plateau changes)");
  STRATA_CHECK(args.backup_dir.empty(), InvalidArgument,
               "--backup-dir: not supported under parameter_server; --checkpoint-dir keeps the ps shards, which a "
               "restarted ps task restores");
  STRATA_CHECK(args.checkpoint_every == 0 || !job.checkpoint_dir.empty(), InvalidArgument,
               "--checkpoint-every needs --checkpoint-dir (or checkpoint_dir in " << job.file << ")");
  // Resolved now (open_strategy resolves again, keeping these) so that a job file's other strategy is replaced first.
  job.strategy = resolve_strategy(job.strategy, args.strategy);
  job.strategy.ps_checkpoint_dir = job.checkpoint_dir;
  job.strategy.ps_checkpoint_every_steps = args.checkpoint_every;
  const cluster::TaskInfo task = cluster::resolve_cluster_from_environment();
  if (!job.checkpoint_dir.empty()) {
    check_output_directory(job.checkpoint_dir,
                           args.checkpoint_dir.empty() ? job.file + ": checkpoint_dir" : "--checkpoint-dir");
    // A fresh job's ps tasks would restore another run's shards; a ps task restarted within the job must find them,
    // and so must a chief restarted with the job (the same job id: the launcher's secret), which continues from
    // them, as one given --resume does.
    if (task.task_type == "chief") {
      const std::optional<ps::CommittedPsCheckpoint> committed = ps::committed_ps_checkpoint(job.checkpoint_dir);
      const std::string job_id = cluster::process_job_credentials()->job_id();
      const bool same_job = committed && !job_id.empty() && committed->job_id == job_id;
      STRATA_CHECK(!args.resume || committed, InvalidArgument,
                   "--resume: checkpoint directory '" << job.checkpoint_dir
                                                      << "' holds no committed parameter-server checkpoint");
      if (!args.resume && !same_job) {
        for (const auto& entry : fs::directory_iterator(job.checkpoint_dir)) {
          STRATA_CHECK(!(entry.is_directory() && entry.path().filename().string().rfind("ps-", 0) == 0 &&
                         !fs::is_empty(entry.path())),
                       InvalidArgument,
                       "checkpoint directory '" << job.checkpoint_dir << "' already holds the ps shards of an earlier "
                                                << "run (" << entry.path().filename().string()
                                                << "): pass --resume to continue it, or give an empty directory");
        }
      }
      job.strategy.ps_resume = committed && (args.resume || same_job);
    }
  }
  if (task.task_type == "chief") check_model_checkpoint_path(job);
  if (!args.csv_log.empty() && task.task_type == "chief") check_output_file(args.csv_log, "--csv-log");
  if (!args.log_dir.empty() && task.task_type == "chief") check_output_directory(args.log_dir, "--log-dir");
  const std::unique_ptr<distribute::Strategy> strategy = open_strategy(job, args.strategy, cores);
  auto& servers = static_cast<ps::ParameterServerStrategy&>(*strategy);
  if (servers.task_type() == "ps") {
    std::printf("serving variables on %s", task.address.c_str());
    if (servers.server()->shards_resynced() > 0) {
      const int64_t copied = servers.server()->shards_resynced();
      std::printf(" (copied %lld shard%s from the other ps tasks, as their backup)", static_cast<long long>(copied),
                  copied == 1 ? "" : "s");
    } else if (servers.server()->shards_restored() > 0) {
      const int64_t restored = servers.server()->shards_restored();
      std::printf(" (restored %lld shard%s from %s/ckpt-%lld)", static_cast<long long>(restored),
                  restored == 1 ? "" : "s", servers.ps_checkpoint_dir(task.task_index).c_str(),
                  static_cast<long long>(servers.committed_checkpoint()));
    }
    std::printf("\n");
    std::fflush(stdout);
    servers.join();  // until the launcher (or whoever runs the cluster) stops this task
    return;
  }
  if (servers.task_type() == "worker") {
    // Each worker reads the whole training set in an order of its own.
    job.data.seed = job.data.seed.value_or(job.seed) + 1 + static_cast<uint64_t>(task.task_index);
    const data::Dataset train = train_dataset(job);
    manual_seed(job.seed);
    std::shared_ptr<Sequential> model = make_model(job, *strategy, 0);
    std::printf("serving training steps on %s\n", task.address.c_str());
    std::fflush(stdout);
    TraceRecording recording(args.trace, args.trace_steps, task);
    const History served = model->fit(train);
    recording.finish();
    std::printf("served %lld training steps\n", static_cast<long long>(served.steps_served));
    return;
  }
  const data::Dataset train = train_dataset(job);
  const int64_t steps_per_epoch = batches_per_pass(train);
  manual_seed(job.seed);
  std::shared_ptr<Sequential> model = make_model(job, *strategy, steps_per_epoch);
  model->print_summary();
  check_test_data(job);
  FitOptions fit;
  fit.epochs = job.epochs;
  fit.steps_per_epoch = steps_per_epoch;
  fit.verbose = args.verbose;
  add_job_callbacks(fit, job);
  if (!args.csv_log.empty()) fit.callbacks.push_back(std::make_shared<callbacks::CSVLogger>(args.csv_log));
  add_log_callbacks(fit, args, /*chief=*/true);
  auto nan = std::make_shared<callbacks::TerminateOnNaN>(callbacks::TerminateOnNaN::Options{.verbose = false});
  fit.callbacks.insert(fit.callbacks.begin(), nan);
  TraceRecording recording(args.trace, args.trace_steps, task);
  const History history = model->fit(train, fit);
  recording.finish();
  fail_if_fired(*nan);
  if (!history.epochs.empty()) {
    std::printf("training ended after epoch %lld of %lld: %lld steps on %lld worker%s\n",
                static_cast<long long>(history.epochs.back() + 1), static_cast<long long>(job.epochs),
                static_cast<long long>((history.epochs.back() + 1) * steps_per_epoch),  // a resumed job's too
                static_cast<long long>(servers.num_worker_tasks()), servers.num_worker_tasks() == 1 ? "" : "s");
  }
  // Where the steps ran: a call lost with its worker was re-run on another.
  const std::vector<ps::WorkerStatus> workers = servers.coordinator().worker_status();
  for (size_t i = 0; i < workers.size(); ++i) {
    std::printf("worker:%zu (%s): ran %lld steps, lost %lld calls\n", i, workers[i].address.c_str(),
                static_cast<long long>(workers[i].closures_run), static_cast<long long>(workers[i].times_lost));
  }
  // What each ps did: every step pushes each of its shards once, so the pushes applied count the steps applied (a
  // step re-run after a lost worker has its repeated pushes dropped). A restarted ps counts from its restart. With
  // backups, "shards" are those a ps serves; it also holds the backups of others', and took some over.
  for (const auto& client : servers.servers()) {
    const ps::ParameterServerClient::Stats stats = client->stats();
    const int64_t primaries = stats.shards - stats.backups;
    std::printf("%s: %lld shard%s, %lld pushes applied, %lld repeats dropped",
                servers.describe_ps(client->address()).c_str(), static_cast<long long>(primaries),
                primaries == 1 ? "" : "s", static_cast<long long>(stats.pushes_applied),
                static_cast<long long>(stats.pushes_dropped));
    // Each shard it serves takes one update a step (a synchronous round's counts once), restored with it.
    std::string updates;
    for (const auto& shard : stats.shard_status) {
      if (shard.backup) continue;
      updates += (updates.empty() ? "" : ", ") + shard.name + " " + std::to_string(shard.updates);
      if (shard.takeovers == 1) updates += " [taken over here]";
      if (shard.takeovers > 1) updates += " [taken over here x" + std::to_string(shard.takeovers) + "]";
    }
    if (!updates.empty()) std::printf(" (updates: %s)", updates.c_str());
    if (servers.replicating()) {
      std::printf("; backs up %lld shard%s (%lld pushes); took over %lld shard%s", static_cast<long long>(stats.backups),
                  stats.backups == 1 ? "" : "s", static_cast<long long>(stats.pushes_replicated),
                  static_cast<long long>(stats.takeovers), stats.takeovers == 1 ? "" : "s");
    }
    std::printf("\n");
  }
  if (servers.rollbacks() > 0) {
    std::printf("rolled back %lld time%s after a ps lost the job's state: %lld steps run again\n",
                static_cast<long long>(servers.rollbacks()), servers.rollbacks() == 1 ? "" : "s",
                static_cast<long long>(servers.steps_rolled_back()));
  }
  print_test_line(model->evaluate(test_dataset(job)));
}

// Under mixed_bfloat16, one line of what computes in bf16 for replicas on `device`.
void print_mixed_precision(const Device& device) {
  if (nn::global_policy().compute_dtype() != DType::kBFloat16) return;
  const char* what = !device.is_cpu() ? "Dense, attention and convolution products compute in bf16 on the GPU "
                                        "(cuBLAS, cuDNN; a convolution's bf16 output is widened to float32)"
                     : nn::effective_compute_dtype() == DType::kBFloat16
                         ? "Dense, attention and convolution products compute in bf16 through oneDNN"
                         : "this CPU has no bf16 instructions, so everything computes in float32";
  std::printf("mixed precision: %s: %s; variables, gradients and the loss stay float32\n",
              nn::global_policy().name().c_str(), what);
  std::fflush(stdout);
}

void run_train(const TrainArgs& args) {
  apply_security_flags(args.security);  // before any service of the job starts
  const cluster::CoreShare cores = apply_core_share(args.threads);
  Job job = load_job(args.job);
  if (args.epochs > 0) job.epochs = args.epochs;
  if (args.batch_size > 0) job.batch_size = args.batch_size;
  if (!args.checkpoint_dir.empty()) job.checkpoint_dir = args.checkpoint_dir;
  // Before any layer runs: the policy decides how each call computes (a layer on a CPU without bf16 warns once).
  nn::set_global_policy(args.mixed_precision);
  if (resolve_strategy(job.strategy, args.strategy).name == "parameter_server") {
    print_mixed_precision(Device::cpu());  // every task of a parameter-server job computes on its CPU
    run_parameter_server_task(job, args, cores);
    return;
  }
  STRATA_CHECK(!args.resume || !job.checkpoint_dir.empty(), InvalidArgument,
               "--resume needs --checkpoint-dir (or checkpoint_dir in " << job.file << ")");
  STRATA_CHECK(args.checkpoint_every == 0 || !job.checkpoint_dir.empty(), InvalidArgument,
               "--checkpoint-every needs --checkpoint-dir (or checkpoint_dir in " << job.file << ")");
  // Every output path now, not at the end of the first epoch.
  if (!job.checkpoint_dir.empty()) {
    check_output_directory(job.checkpoint_dir,
                           args.checkpoint_dir.empty() ? job.file + ": checkpoint_dir" : "--checkpoint-dir");
    // A fresh run would number its checkpoints from the start and write over an earlier run's. (A damaged
    // checkpoint there is a DataCorrupt naming it, with or without --resume.)
    if (!args.resume) {
      if (const std::optional<std::string> earlier = io::CheckpointManager(job.checkpoint_dir).latest()) {
        STRATA_THROW(InvalidArgument, "checkpoint directory '" << job.checkpoint_dir << "' already holds " << *earlier
                                                               << " of an earlier run: pass --resume to "
                                                                  "continue it, or give an empty directory");
      }
    }
  }
  STRATA_CHECK(args.backup_every_steps == 0 || !args.backup_dir.empty(), InvalidArgument,
               "--backup-every-steps needs --backup-dir");
  if (!args.backup_dir.empty()) {
    STRATA_CHECK(!args.resume, InvalidArgument,
                 "--backup-dir resumes from its backup by itself; --resume is for --checkpoint-dir: give one of them");
    STRATA_CHECK(args.backup_dir != job.checkpoint_dir, InvalidArgument,
                 "--backup-dir and the checkpoint directory are both '" << args.backup_dir
                                                                        << "': backups are deleted when training "
                                                                           "completes, checkpoints are kept");
    check_output_directory(args.backup_dir, "--backup-dir");
  }
  if (!args.csv_log.empty()) check_output_file(args.csv_log, "--csv-log");
  if (!args.log_dir.empty()) check_output_directory(args.log_dir, "--log-dir");
  check_model_checkpoint_path(job);
  const std::unique_ptr<distribute::Strategy> strategy = open_strategy(job, args.strategy, cores);
  print_mixed_precision(strategy->replica_device(0));  // once the devices are known to exist

  const data::Dataset train = train_dataset(job);
  const int64_t steps_per_epoch =
      job.lr_scaling.warmup_epochs > 0 || !job.schedule.name.empty() ? batches_per_pass(train) : 0;
  manual_seed(job.seed);
  std::shared_ptr<Sequential> model = make_model(job, *strategy, steps_per_epoch);
  warn(batch_memory_warning(activation_bytes(*model, job.batch_size), available_memory_bytes(), job.batch_size));
  if (const std::string lr =
          learning_rate_line(job.lr_scaling, make_optimizer(job)->learning_rate(), job.batch_size, steps_per_epoch);
      !lr.empty()) {
    std::printf("%s\n", lr.c_str());
  }
  if (!job.schedule.name.empty()) {
    const float peak = scaled_learning_rate(job.lr_scaling, make_optimizer(job)->learning_rate(), job.batch_size,
                                            steps_per_epoch)(0);
    std::printf("learning rate: %s to a peak of %g after %g warmup epochs, then down to %g of it by epoch %lld\n",
                job.schedule.name.c_str(), static_cast<double>(peak), job.schedule.warmup_epochs, job.schedule.alpha,
                static_cast<long long>(job.epochs));
  }
  model->print_summary();
  // Read every test record once (decompressed, CRC-checked, parsed) so that a corrupt test shard fails
  // now and not after the last epoch. It costs one pass over the test set: for Fashion-MNIST's 10k
  // records (about 8 MB) well under a second, small next to an epoch over the 60k training records.
  check_test_data(job);

  FitOptions fit;
  fit.epochs = job.epochs;
  fit.steps_per_execution = job.steps_per_execution;
  // Across workers the chief shows the progress and writes the CSV log and the TensorBoard files; the others print a
  // line per epoch with --verbose 2 only; every worker prints the test line.
  fit.verbose = strategy->is_chief() || args.verbose == 2 ? args.verbose : 0;
  if (!job.checkpoint_dir.empty()) {
    fit.callbacks.push_back(std::make_shared<callbacks::BackupAndRestore>(
        job.checkpoint_dir,
        callbacks::BackupAndRestore::Options{
            .restore = args.resume, .save_freq = args.checkpoint_every, .delete_checkpoint = false}));
  }
  if (!args.backup_dir.empty()) {
    fit.callbacks.push_back(std::make_shared<callbacks::BackupAndRestore>(
        args.backup_dir, callbacks::BackupAndRestore::Options{.save_freq = args.backup_every_steps}));
  }
  add_job_callbacks(fit, job);
  if (!args.csv_log.empty() && strategy->is_chief()) {
    fit.callbacks.push_back(
        std::make_shared<callbacks::CSVLogger>(args.csv_log, callbacks::CSVLogger::Options{.append = args.resume}));
  }
  add_log_callbacks(fit, args, strategy->is_chief());
  // Stop at the first NaN or infinite loss; fit returns normally, so the run is failed here.
  auto nan = std::make_shared<callbacks::TerminateOnNaN>(callbacks::TerminateOnNaN::Options{.verbose = false});
  fit.callbacks.insert(fit.callbacks.begin(), nan);
  TraceRecording recording(args.trace, args.trace_steps, cluster::resolve_cluster_from_environment());
  const History history = model->fit(train, fit);
  recording.finish();
  fail_if_fired(*nan);
  // Where training ended: a resumed run counts the steps made before the restart too.
  if (!history.epochs.empty()) {
    std::string examples;
    for (int64_t n : history.examples) examples += " " + std::to_string(n);
    // A run resumed past its first epoch lists only the epochs it ran: it says from which.
    const std::string which = history.epochs.front() == 0
                                  ? std::string()
                                  : " (from epoch " + std::to_string(history.epochs.front() + 1) +
                                        ", where this run resumed)";
    std::printf(
        "training ended after epoch %lld of %lld: %lld optimizer steps in all; examples trained per "
        "epoch%s:%s\n",
        static_cast<long long>(history.epochs.back() + 1), static_cast<long long>(job.epochs),
        static_cast<long long>(model->step()), which.c_str(), examples.c_str());
  }
  if (const auto* pipeline = dynamic_cast<const parallel::PipelineStrategy*>(strategy.get());
      pipeline && pipeline->measured().steps > 0) {
    std::string peaks;
    for (int p : pipeline->measured().peak_activations) peaks += (peaks.empty() ? "" : " ") + std::to_string(p);
    std::printf(
        "pipeline: stages %s; idle %.1f%% of the stages' time over %lld steps (the schedule's simulated "
        "bubble %.1f%%); micro-batches alive at most, per stage: %s\n",
        pipeline->layout().c_str(), 100.0 * pipeline->measured().mean_bubble_fraction(),
        static_cast<long long>(pipeline->measured().steps),
        100.0 * parallel::simulate(pipeline->schedule()).bubble_fraction, peaks.c_str());
  }
  if (const auto* tensor = dynamic_cast<const parallel::TensorParallelStrategy*>(strategy.get());
      tensor && !tensor->layout().empty()) {
    std::printf("tensor_parallel: layers %s (whole weights reassembled in the model after every step)\n",
                tensor->layout().c_str());
  }
  print_test_line(model->evaluate(test_dataset(job)));
}

void run_evaluate(const EvaluateArgs& args) {
  const cluster::CoreShare cores = apply_core_share(args.threads);
  Job job = load_job(args.job);
  if (args.batch_size > 0) job.batch_size = args.batch_size;
  const std::unique_ptr<distribute::Strategy> strategy = open_strategy(job, args.strategy, cores);
  std::shared_ptr<Sequential> model = make_model(job, *strategy, 0);
  load_job_checkpoint(*model, args.checkpoint);
  print_test_line(model->evaluate(test_dataset(job)));
}

// CLI11's own checks say "Value 0 not in range 0.000000 to 1.797...e308"; these say what is wanted:
// "--epochs: must be a positive integer, got '0'".
const CLI::Validator kPositiveInteger(
    [](std::string& value) -> std::string {
      long long v = 0;
      size_t used = 0;
      try {
        v = std::stoll(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      return used != 0 && used == value.size() && v > 0 ? "" : "must be a positive integer, got '" + value + "'";
    },
    "POSITIVE");
const CLI::Validator kVerbosity(
    [](std::string& value) -> std::string {
      return value == "0" || value == "1" || value == "2" ? "" : "must be 0, 1 or 2, got '" + value + "'";
    },
    "0|1|2");
// --mixed-precision: a dtype policy's name, or an error that lists them.
const CLI::Validator kPolicyName(
    [](std::string& value) -> std::string {
      for (const auto& name : nn::policy_choices())
        if (value == name) return "";
      return "unknown mixed precision '" + value +
             "'; choose one of float32, bf16, mixed_bfloat16 (bf16 is Keras's mixed_bfloat16 policy)";
    },
    "float32|bf16|mixed_bfloat16");

// --strategy, --replicas and --cross-device-ops on `command`.
void add_strategy_options(CLI::App* command, StrategyFlags& flags) {
  command->add_option(
      "--strategy", flags.strategy,
      "distribution strategy: one_device, mirrored, central_storage, multi_worker_mirrored, "
      "parameter_server, pipeline, tensor_parallel or local_sgd (overrides the job's `strategy:`; default one_device)");
  command->add_option("--device", flags.device,
                      "where the replicas train: cpu, gpu or gpu:N (overrides the job's `device:`; default cpu). "
                      "one_device: gpu is GPU 0; mirrored: gpu is GPUs 0..replicas-1 (default every visible GPU), "
                      "all-reduced by NCCL; multi_worker_mirrored: gpu is each worker's own GPU, on nccl. A GPU needs "
                      "a build with CUDA (-DSTRATA_WITH_CUDA=ON) and the GPUs visible, else the command fails saying "
                      "which");
  command
      ->add_option("--replicas", flags.replicas,
                   "CPU replicas for mirrored / central_storage, each a thread with its share of the cores "
                   "(overrides `replicas:`; default one per core; mirrored --device gpu: GPUs, default every visible "
                   "one); for multi_worker_mirrored, per worker (default 1)")
      ->check(kPositiveInteger);
  command->add_option("--cross-device-ops", flags.cross_device_ops,
                      "how mirrored all-reduces gradients: reduction_to_one_device, ring or tree on CPU replicas, nccl "
                      "on GPU replicas (overrides `cross_device_ops:`; default reduction_to_one_device, nccl on "
                      "GPUs)");
  command->add_option("--collective-timeout", flags.collective_timeout_seconds,
                      "multi_worker_mirrored, local_sgd, and pipeline on several workers: seconds any collective may "
                      "wait for the "
                      "other workers before the job fails naming them (default 300)");
  command->add_option("--rendezvous-timeout", flags.rendezvous_timeout_seconds,
                      "multi_worker_mirrored, local_sgd, and pipeline on several workers: seconds the start-up may "
                      "wait for the other workers, saying every 10 s whom it waits for (default 60, or the "
                      "collective timeout if shorter); parameter_server: how long a worker waits for the chief's fit");
  command->add_flag("--no-ps-backups", flags.no_ps_backups,
                    "parameter_server with 2 or more ps: keep one copy of each shard instead of a primary and a "
                    "backup on another ps (a lost ps is then waited for and restored from its checkpoint)");
  command->add_option("--max-staleness", flags.max_staleness,
                      "parameter_server: a worker may start step v only when every worker has finished step v - N "
                      "(0: synchronous rounds, each round's gradients applied as one mean; default: asynchronous)");
  command
      ->add_option("--stages", flags.stages,
                   "pipeline: stages the model's layers are cut into, each a thread with its share of the cores "
                   "(overrides `stages:`; default 2); under `strata launch --workers N` every worker runs a "
                   "replica of the pipeline on its share of each batch")
      ->check(kPositiveInteger);
  command
      ->add_option("--micro-batches", flags.micro_batches,
                   "pipeline: micro-batches each global batch is split into (overrides `micro_batches:`; default 4)")
      ->check(kPositiveInteger);
  command->add_option("--schedule", flags.schedule,
                      "pipeline: the order of the micro-batches' forward and backward passes: gpipe, 1f1b, "
                      "interleaved or zb-h1 (overrides `schedule:`; default 1f1b)");
  command->add_flag("--recompute", flags.recompute,
                    "pipeline: stages keep only their input between a micro-batch's forward and backward and run the "
                    "forward again before the backward (less memory, one more forward)");
  command
      ->add_option("--tp", flags.tp,
                   "tensor_parallel: ranks (threads of this process) that TransformerEncoder blocks, "
                   "MultiHeadAttention and Dense pairs are split over, Megatron-style (overrides `tp:`; default 2)")
      ->check(kPositiveInteger);
  command
      ->add_option("--sync-every", flags.sync_every,
                   "local_sgd: local steps each worker takes between two averages of the workers' weights "
                   "(overrides `sync_every:`; default 8)")
      ->check(kPositiveInteger);
  command->add_option("--outer-step", flags.outer_step,
                      "local_sgd: none (the plain average) or nesterov (DiLoCo's outer step: SGD with Nesterov "
                      "momentum 0.9 at rate 0.7 on the weights' change; overrides `outer_step:`; default none)");
  command
      ->add_option("--chunks", flags.chunks,
                   "pipeline, interleaved schedule: model chunks per stage (overrides `chunks:`; default 2)")
      ->check(kPositiveInteger);
  command
      ->add_option("--bytes-per-pack", flags.bytes_per_pack,
                   "multi_worker_mirrored, and pipeline replicas on several workers: gradients are all-reduced in "
                   "buckets of about N bytes, each started as "
                   "soon as backward has filled it (default 26214400, PyTorch DDP's 25 MiB); a number above the "
                   "model's size sends all gradients in one all-reduce after backward")
      ->check(kPositiveInteger);
  command->add_option("--gradient-compression", flags.gradient_compression,
                      "multi_worker_mirrored: how gradients travel between the workers: none (float32) or bf16 "
                      "(bfloat16, half the bytes; summed in float32) (default none)");
}

}  // namespace

void add_train_commands(CLI::App& app) {
  auto train_args = std::make_shared<TrainArgs>();
  CLI::App* train =
      app.add_subcommand("train",
                         "Train the model a job file describes, then print the test-set result on one line "
                         "(\"test loss 0.2512 - test accuracy 0.9134\").");
  train
      ->add_option("job", train_args->job,
                   "job YAML file (data, model, loss, optimizer, metrics, epochs, batch_size, strategy)")
      ->required()
      ->check(CLI::ExistingFile);
  train->add_option("--epochs", train_args->epochs, "override the job's epochs")->check(kPositiveInteger);
  train->add_option("--batch-size", train_args->batch_size, "override the job's batch_size (the global batch)")
      ->check(kPositiveInteger);
  train->add_option("--checkpoint-dir", train_args->checkpoint_dir,
                    "write a full training checkpoint (weights, optimizer, RNG, and where training stands: epoch, "
                    "step, the input pipeline's position) here after every epoch");
  train
      ->add_option("--checkpoint-every", train_args->checkpoint_every,
                   "also checkpoint every N global steps (named ckpt-<step>), so a killed run loses at most N "
                   "steps; --resume then continues mid-epoch, exactly")
      ->check(kPositiveInteger);
  train->add_flag("--resume", train_args->resume,
                  "continue exactly where the latest checkpoint in --checkpoint-dir stood (on one device the "
                  "weights end bitwise as if never stopped); a damaged checkpoint is an error");
  train->add_option("--backup-dir", train_args->backup_dir,
                    "Keras's BackupAndRestore: back up training here after every epoch; a run started again with "
                    "the same --backup-dir (a restarted job) continues from the last backup, which is deleted when "
                    "training completes");
  train
      ->add_option("--backup-every-steps", train_args->backup_every_steps,
                   "also back up every N global steps, so a restarted job loses at most N steps and continues "
                   "mid-epoch, exactly")
      ->check(kPositiveInteger);
  train->add_option("--csv-log", train_args->csv_log, "append one row per epoch (loss, metrics) to this CSV file");
  train->add_option(
      "--log-dir", train_args->log_dir,
      "write TensorBoard event files here (Keras's TensorBoard callback): the train/ run gets "
      "epoch_loss, epoch_<metric>, epoch_learning_rate, epoch_examples_per_second and "
      "epoch_input_wait_percent (and across workers epoch_communication_seconds) at each epoch's end (step = "
      "epoch); view with `tensorboard --logdir DIR`, or make a page of it with `strata report DIR`");
  train
      ->add_option("--log-every-steps", train_args->log_every_steps,
                   "with --log-dir: also write batch_loss and batch_<metric> (the epoch's running values) every N "
                   "global steps, at that step (Keras's update_freq=N)")
      ->check(kPositiveInteger);
  train
      ->add_option("--log-format", train_args->log_format,
                   "text: the progress bar (default); json: instead of it, one JSON object per epoch on stdout, "
                   "e.g. {\"epoch\": 1, \"loss\": 0.51, \"accuracy\": 0.81, \"input_wait_fraction\": 0.02} "
                   "(epoch from 1; NaN or infinite values as null); the other lines stay as they are")
      ->check(CLI::IsMember({"text", "json"}));
  train->add_option("--trace", train_args->trace,
                    "write a timeline of the training steps as Chrome trace-event JSON (open it in Perfetto or "
                    "chrome://tracing): spans of input wait, forward, backward, each collective (gradient buckets "
                    "on the communicator's thread, overlapping backward), parameter-server pushes and pulls, optimizer "
                    "updates, checkpoint writes and membership changes, a row per thread; under `strata launch` each "
                    "task writes FILE's name with .worker-N (or .chief-0, .ps-N) before the extension");
  train->add_option("--trace-steps", train_args->trace_steps,
                    "with --trace: the optimizer steps to record, FIRST:END (0-based, END excluded; default 1:21, "
                    "which leaves out the first step's set-up)");
  train
      ->add_option("--threads", train_args->threads,
                   "CPU threads for the math (default: this task's share of the cores it may run on: "
                   "divided among the job's tasks on this host; STRATA_NUM_THREADS also sets it)")
      ->check(kPositiveInteger);
  train
      ->add_option("--verbose", train_args->verbose,
                   "0 silent, 1 progress bar (a line per epoch when not a terminal), 2 a line per epoch")
      ->check(kVerbosity);
  train
      ->add_option("--mixed-precision", train_args->mixed_precision,
                   "float32 (default), or bf16 (= mixed_bfloat16, Keras's policy): Dense, MultiHeadAttention's "
                   "products and Conv1D/Conv2D compute in bfloat16 through oneDNN (forward and backward; with "
                   "--device gpu through cuBLAS and cuDNN) while variables, optimizer updates and the loss stay "
                   "float32; on a CPU without bf16 instructions it warns once and computes in float32")
      ->check(kPolicyName);
  add_strategy_options(train, train_args->strategy);
  add_security_options(train, train_args->security);
  train->callback([train_args] { run_train(*train_args); });

  auto eval_args = std::make_shared<EvaluateArgs>();
  CLI::App* evaluate = app.add_subcommand(
      "evaluate", "Evaluate a saved model on the job's test set and print \"test loss ... - test accuracy ...\".");
  evaluate->add_option("job", eval_args->job, "job YAML file the model was trained with")
      ->required()
      ->check(CLI::ExistingFile);
  evaluate
      ->add_option("--checkpoint", eval_args->checkpoint,
                   "a checkpoint directory (its latest ckpt-N; a parameter-server job's --checkpoint-dir, its shards "
                   "reassembled), one ckpt-N directory, or a .safetensors file")
      ->required();
  evaluate->add_option("--batch-size", eval_args->batch_size, "override the job's batch_size")->check(kPositiveInteger);
  evaluate
      ->add_option("--threads", eval_args->threads,
                   "CPU threads for the math (default: this task's share of the cores it may run on: "
                   "divided among the job's tasks on this host; STRATA_NUM_THREADS also sets it)")
      ->check(kPositiveInteger);
  add_strategy_options(evaluate, eval_args->strategy);
  evaluate->callback([eval_args] { run_evaluate(*eval_args); });
}

}  // namespace strata::cli
