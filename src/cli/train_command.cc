// `strata train` and `strata evaluate`: run a job YAML file with no C++ written (see commands.h, job.h).
#include <cstdio>
#include <memory>
#include <sys/stat.h>

#include "cli/commands.h"
#include "cli/job.h"
#include "cli/distribution.h"
#include "strata/distribute/strategies.h"
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
  std::string csv_log;
  int threads = 0;
  int verbose = 1;
  StrategyFlags strategy;
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

// The job's strategy (flags over the file), announced on one line. Call after set_num_threads: replicas
// share the calling thread's cores.
std::unique_ptr<distribute::Strategy> open_strategy(Job& job, const StrategyFlags& flags) {
  job.strategy = resolve_strategy(job.strategy, flags);
  std::unique_ptr<distribute::Strategy> strategy = make_job_strategy(job.strategy);
  std::printf("%s\n", strategy_line(*strategy, job.batch_size).c_str());
  std::fflush(stdout);
  return strategy;
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

void run_train(const TrainArgs& args) {
  if (args.threads > 0) set_num_threads(args.threads);
  Job job = load_job(args.job);
  if (args.epochs > 0) job.epochs = args.epochs;
  if (args.batch_size > 0) job.batch_size = args.batch_size;
  if (!args.checkpoint_dir.empty()) job.checkpoint_dir = args.checkpoint_dir;
  STRATA_CHECK(!args.resume || !job.checkpoint_dir.empty(), InvalidArgument,
               "--resume needs --checkpoint-dir (or checkpoint_dir in " << job.file << ")");
  const std::unique_ptr<distribute::Strategy> strategy = open_strategy(job, args.strategy);

  const data::Dataset train = train_dataset(job);
  int64_t steps_per_epoch = 0;
  if (job.lr_scaling.warmup_epochs > 0) {
    steps_per_epoch = train.cardinality();
    if (steps_per_epoch < 0) {  // e.g. TFRecord files: count one pass of batches
      steps_per_epoch = 0;
      for (data::Iterator it = train.make_iterator(); it.next();) ++steps_per_epoch;
    }
  }
  manual_seed(job.seed);
  std::shared_ptr<Sequential> model = make_model(job, *strategy, steps_per_epoch);
  if (const std::string lr =
          learning_rate_line(job.lr_scaling, make_optimizer(job)->learning_rate(), job.batch_size, steps_per_epoch);
      !lr.empty()) {
    std::printf("%s\n", lr.c_str());
  }
  model->print_summary();

  FitOptions fit;
  fit.epochs = job.epochs;
  fit.steps_per_execution = job.steps_per_execution;
  fit.verbose = args.verbose;
  if (!job.checkpoint_dir.empty()) {
    fit.callbacks.push_back(std::make_shared<callbacks::BackupAndRestore>(
        job.checkpoint_dir, callbacks::BackupAndRestore::Options{.restore = args.resume}));
  }
  if (!args.csv_log.empty()) {
    fit.callbacks.push_back(
        std::make_shared<callbacks::CSVLogger>(args.csv_log, callbacks::CSVLogger::Options{.append = args.resume}));
  }
  model->fit(train, fit);
  print_test_line(model->evaluate(test_dataset(job)));
}

void run_evaluate(const EvaluateArgs& args) {
  if (args.threads > 0) set_num_threads(args.threads);
  Job job = load_job(args.job);
  if (args.batch_size > 0) job.batch_size = args.batch_size;
  const std::unique_ptr<distribute::Strategy> strategy = open_strategy(job, args.strategy);
  std::shared_ptr<Sequential> model = make_model(job, *strategy, 0);
  struct stat st {};
  STRATA_CHECK(::stat(args.checkpoint.c_str(), &st) == 0, IoError, "no checkpoint at '" << args.checkpoint << "'");
  if (S_ISDIR(st.st_mode)) {
    model->restore_checkpoint(args.checkpoint);
  } else {
    model->load_weights(args.checkpoint);
  }
  print_test_line(model->evaluate(test_dataset(job)));
}

// --strategy, --replicas and --cross-device-ops on `command`.
void add_strategy_options(CLI::App* command, StrategyFlags& flags) {
  command->add_option("--strategy", flags.strategy,
                      "distribution strategy: one_device, mirrored or central_storage (overrides the job's "
                      "`strategy:`; default one_device)");
  command->add_option("--replicas", flags.replicas,
                      "CPU replicas for mirrored / central_storage, each a thread with its share of the cores "
                      "(overrides `replicas:`; default one per core)");
  command->add_option("--cross-device-ops", flags.cross_device_ops,
                      "how mirrored all-reduces gradients: reduction_to_one_device, ring or tree (overrides "
                      "`cross_device_ops:`; default reduction_to_one_device)");
}

}  // namespace

void add_train_commands(CLI::App& app) {
  auto train_args = std::make_shared<TrainArgs>();
  CLI::App* train = app.add_subcommand(
      "train",
      "Train the model a job file describes, then print the test-set result on one line "
      "(\"test loss 0.2512 - test accuracy 0.9134\").");
  train
      ->add_option("job", train_args->job,
                   "job YAML file (data, model, loss, optimizer, metrics, epochs, batch_size, strategy)")
      ->required()
      ->check(CLI::ExistingFile);
  train->add_option("--epochs", train_args->epochs, "override the job's epochs")->check(CLI::PositiveNumber);
  train->add_option("--batch-size", train_args->batch_size, "override the job's batch_size (the global batch)")
      ->check(CLI::PositiveNumber);
  train->add_option("--checkpoint-dir", train_args->checkpoint_dir,
                    "write a full training checkpoint (weights, optimizer, epoch, RNG) here after every epoch");
  train->add_flag("--resume", train_args->resume,
                  "continue from the latest checkpoint in --checkpoint-dir (from the epoch after it)");
  train->add_option("--csv-log", train_args->csv_log, "append one row per epoch (loss, metrics) to this CSV file");
  train->add_option("--threads", train_args->threads, "CPU threads for the math (default: all cores)")
      ->check(CLI::PositiveNumber);
  train->add_option("--verbose", train_args->verbose,
                    "0 silent, 1 progress bar (a line per epoch when not a terminal), 2 a line per epoch")
      ->check(CLI::Range(0, 2));
  add_strategy_options(train, train_args->strategy);
  train->callback([train_args] { run_train(*train_args); });

  auto eval_args = std::make_shared<EvaluateArgs>();
  CLI::App* evaluate = app.add_subcommand(
      "evaluate", "Evaluate a saved model on the job's test set and print \"test loss ... - test accuracy ...\".");
  evaluate->add_option("job", eval_args->job, "job YAML file the model was trained with")
      ->required()
      ->check(CLI::ExistingFile);
  evaluate->add_option("--checkpoint", eval_args->checkpoint,
                       "a checkpoint directory (its latest ckpt-N), one ckpt-N directory, or a .safetensors file")
      ->required();
  evaluate->add_option("--batch-size", eval_args->batch_size, "override the job's batch_size")->check(CLI::PositiveNumber);
  evaluate->add_option("--threads", eval_args->threads, "CPU threads for the math (default: all cores)")
      ->check(CLI::PositiveNumber);
  add_strategy_options(evaluate, eval_args->strategy);
  evaluate->callback([eval_args] { run_evaluate(*eval_args); });
}

}  // namespace strata::cli
