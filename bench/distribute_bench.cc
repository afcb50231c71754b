// Trains the Keras tutorial CNN on Fashion-MNIST with Model::fit under a distribution strategy and prints
// the images/s of one steady-state epoch (after a warm-up epoch) as JSON. bench/distribute_bench.py runs it
// for MirroredStrategy and OneDeviceStrategy beside the same training in PyTorch.
//
//   distribute_bench --strategy one_device|mirrored|central_storage|independent|multi_worker_mirrored|parameter_server
//                               |local_sgd
//                    --replicas N --threads T
//                    [--batch 128] [--epochs 1] [--data DIR] [--cross-device-ops ring] [--bucket-kb K]
//                    [--steps-per-execution S] [--gradient-compression none|bf16] [--sync-every H] [--outer-step none|nesterov]
//                    [--trace FILE] [--steps-per-epoch S] [--ps-backups 0|1] [--step-times FILE]
//
// --batch is the global batch; --threads the cores in all (one_device: its intra-op threads; the others:
// split evenly over the replicas).
//
// --strategy independent is no strategy but this machine's ceiling for one: N trainers in threads of one
// process, each with threads/N cores, its own model and its own half (1/N) of the data at batch/N, that
// never communicate or wait for each other. No synchronous strategy with N replicas can beat their
// combined images/s, since it does the same work plus the all-reduce and the lock-step.
//
// --strategy local_sgd (LocalSGDStrategy, the cluster from TF_CONFIG like multi_worker_mirrored): each worker takes
// --sync-every local steps, then the workers average their weights (--outer-step nesterov: DiLoCo's outer step).
//
// --steps-per-epoch S makes every epoch (the warm-up one too) S global steps of the training data repeated, so that a
// short run times as many steps as its peers (bench/*.py); 0, the default, is one pass over the 60000 images (the
// parameter-server chief: 60000 / batch steps).
//
// --trace FILE writes a Chrome trace of 100 steady-state steps (steps 600..699, in the measured epoch) to FILE, for
// bench/trace_breakdown.py: where each replica's time goes.
//
// --strategy parameter_server runs under `strata launch --chief --workers N --ps M`: the chief's fit schedules
// 60000 / batch steps per epoch (each a batch of --batch on one worker, which reads the whole training set in an
// order of its own) and prints the JSON; workers serve the steps; ps tasks serve the variables until stopped. With 2
// or more ps each shard has a backup on another ps (--ps-backups 0: none). --step-times FILE: the chief writes the
// wall-clock time each step ended (bench/parameter_server_bench.py times a lost ps's takeover with it).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "strata/data/convert.h"
#include "strata/data/dataset.h"
#include "strata/distribute/local_sgd.h"
#include "strata/distribute/multi_worker.h"
#include "strata/distribute/strategies.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/ps/parameter_server_strategy.h"
#include "strata/random.h"
#include "strata/trace.h"
#include "strata/threading.h"
#include "strata/train/model.h"

using namespace strata;

int main(int argc, char** argv) {
  std::string strategy_name = "mirrored", dir = "/usr/share/datasets/fashion-mnist", cross_device_ops = distribute::kDefaultCrossDeviceOps;
  int replicas = 2, threads = 2;
  int64_t bucket_kb = 0;  // 0: the strategy's default
  std::string gradient_compression = "none";  // multi_worker_mirrored: how gradients travel
  int64_t epochs = 1, batch = 128, steps_per_execution = 1;
  int sync_every = 8;            // local_sgd: local steps between weight averages
  bool outer_nesterov = false;   // local_sgd: DiLoCo's outer step
  std::string trace_path;        // --trace
  int64_t steps_per_epoch = 0;   // --steps-per-epoch; 0: one pass over the data
  bool ps_backups = true;        // --ps-backups 0: parameter_server without shard backups
  std::string step_times_path;   // --step-times FILE: the wall-clock time each step ended, one a line
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--strategy") strategy_name = argv[i + 1];
    else if (flag == "--replicas") replicas = std::stoi(argv[i + 1]);
    else if (flag == "--threads") threads = std::stoi(argv[i + 1]);
    else if (flag == "--data") dir = argv[i + 1];
    else if (flag == "--epochs") epochs = std::stoll(argv[i + 1]);
    else if (flag == "--batch") batch = std::stoll(argv[i + 1]);
    else if (flag == "--cross-device-ops") cross_device_ops = argv[i + 1];
    else if (flag == "--bucket-kb") bucket_kb = std::stoll(argv[i + 1]);
    else if (flag == "--steps-per-execution") steps_per_execution = std::stoll(argv[i + 1]);
    else if (flag == "--gradient-compression") gradient_compression = argv[i + 1];
    else if (flag == "--sync-every") sync_every = std::stoi(argv[i + 1]);
    else if (flag == "--outer-step") outer_nesterov = std::string(argv[i + 1]) == "nesterov";
    else if (flag == "--trace") trace_path = argv[i + 1];
    else if (flag == "--steps-per-epoch") steps_per_epoch = std::stoll(argv[i + 1]);
    else if (flag == "--ps-backups") ps_backups = std::string(argv[i + 1]) != "0";
    else if (flag == "--step-times") step_times_path = argv[i + 1];
  }
  auto make_model = [] {
    return Sequential(std::vector<nn::LayerRef>{nn::Conv2D(32, 3, "relu"), nn::MaxPool2D(2), nn::Flatten(),
                                                nn::Dense(64, "relu"), nn::Dense(10)});
  };
  // Batches of `batch_size` from `split` (shard `index` of `shards`), scaled to [0, 1]; with --steps-per-epoch the
  // training data repeats (fit's iterator then runs on across the epochs).
  auto prep = [&](data::Split split, bool shuffle, int64_t batch_size, int64_t shards = 1, int64_t index = 0) {
    data::Dataset ds = data::Dataset::from_idx(dir, split);
    if (shards > 1) ds = ds.shard(shards, index);
    if (shuffle) ds = ds.shuffle(60000, static_cast<uint64_t>(index));
    if (shuffle && steps_per_epoch > 0) ds = ds.repeat();
    return ds.batch(batch_size)
        .map([](const data::Element& e) { return data::Element({data::to_float(e[0], 1.0f / 255.0f), e[1]}); })
        .prefetch(data::kAutotune);
  };
  // Epoch 1 warms up (oneDNN primitives, allocator, gradient buckets); the figure is the epochs after it.
  struct EpochTimer : Callback {
    std::chrono::steady_clock::time_point start;
    double seconds = 0;
    void on_epoch_begin(int64_t epoch, const Logs&) override {
      if (epoch == 1) start = std::chrono::steady_clock::now();
    }
    void on_train_end(const Logs&) override {
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  };

  // Writes the wall-clock time (seconds since the epoch, as Python's time.time()) each step ended, flushed.
  struct StepTimes : Callback {
    std::FILE* out;
    explicit StepTimes(const std::string& path) : out(std::fopen(path.c_str(), "w")) {}
    ~StepTimes() override {
      if (out) std::fclose(out);
    }
    void on_train_batch_end(int64_t, const Logs&) override {
      if (!out) return;
      const auto now = std::chrono::system_clock::now().time_since_epoch();
      std::fprintf(out, "%.6f\n", std::chrono::duration<double>(now).count());
      std::fflush(out);
    }
  };

  if (strategy_name == "independent") {
    if (replicas < 1 || batch % replicas != 0) {
      std::fprintf(stderr, "distribute_bench: --batch %lld must split evenly over --replicas %d\n",
                   static_cast<long long>(batch), replicas);
      return 2;
    }
    std::vector<double> images_per_s(static_cast<size_t>(replicas));
    std::vector<std::thread> trainers;
    for (int r = 0; r < replicas; ++r)
      trainers.emplace_back([&, r] {
        set_num_threads(std::max(1, threads / replicas));
        manual_seed(0);
        Sequential model = make_model();
        model.build_for({batch / replicas, 28, 28, 1});
        model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::Adam(), {"accuracy"});
        const data::Dataset train = prep(data::Split::kTrain, true, batch / replicas, replicas, r);
        auto timer = std::make_shared<EpochTimer>();
        model.fit(train, {.epochs = epochs + 1, .steps_per_epoch = steps_per_epoch, .callbacks = {timer}, .verbose = 0});
        const double images = steps_per_epoch > 0 ? static_cast<double>(steps_per_epoch * batch) : 60000.0;
        images_per_s[static_cast<size_t>(r)] = images / replicas * static_cast<double>(epochs) / timer->seconds;
      });
    double total = 0;
    for (size_t r = 0; r < trainers.size(); ++r) {
      trainers[r].join();
      total += images_per_s[r];
    }
    std::printf("{\"strategy\": \"independent\", \"replicas\": %d, \"threads\": %d, \"batch\": %lld, "
                "\"images_per_s\": %.1f}\n",
                replicas, threads, static_cast<long long>(batch), total);
    return 0;
  }

  set_num_threads(threads);
  manual_seed(0);
  std::unique_ptr<distribute::Strategy> strategy;
  if (strategy_name == "mirrored" && bucket_kb > 0) {
    distribute::CrossDeviceOps ops = distribute::CrossDeviceOps::from_name(cross_device_ops);
    ops.bucket_bytes = bucket_kb << 10;
    strategy = distribute::MirroredStrategy::cpu_replicas(replicas, {.cross_device_ops = ops});
  } else if (strategy_name == "multi_worker_mirrored" && (bucket_kb > 0 || gradient_compression != "none")) {
    distribute::CommunicationOptions options{.gradient_compression = gradient_compression};
    if (bucket_kb > 0) options.bytes_per_pack = bucket_kb << 10;
    strategy = std::make_unique<distribute::MultiWorkerMirroredStrategy>(cluster::resolve_cluster_from_environment(),
                                                                         options, replicas);
  } else if (strategy_name == "local_sgd") {
    strategy = std::make_unique<distribute::LocalSGDStrategy>(
        distribute::LocalSGDOptions{.sync_every = sync_every, .outer_nesterov = outer_nesterov});
  } else if (strategy_name == "parameter_server") {
    auto servers = std::make_unique<ps::ParameterServerStrategy>(
        cluster::resolve_cluster_from_environment(), ps::ParameterServerStrategyOptions{.replicate_shards = ps_backups});
    if (servers->task_type() == "ps") servers->join();  // until the launcher stops it
    strategy = std::move(servers);
  } else {
    strategy = distribute::make_strategy(strategy_name, replicas, cross_device_ops);
  }
  std::optional<Sequential> model;
  {
    auto scope = strategy->scope();
    model.emplace(make_model());
    model->build_for({batch, 28, 28, 1});
  }
  model->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::Adam(), {"accuracy"});
  const auto* servers = dynamic_cast<const ps::ParameterServerStrategy*>(strategy.get());
  if (servers != nullptr && servers->task_type() == "worker") {  // serves the chief's steps on its own order
    model->fit(prep(data::Split::kTrain, true, batch, 1, servers->task_index() + 1));
    return 0;
  }
  const data::Dataset train = prep(data::Split::kTrain, true, batch), test = prep(data::Split::kTest, false, batch);
  auto timer = std::make_shared<EpochTimer>();
  if (!trace_path.empty()) trace::start({.path = trace_path, .first_step = 600, .end_step = 700});
  // The parameter-server chief reads no input, so its epochs need a length.
  if (steps_per_epoch == 0 && servers != nullptr) steps_per_epoch = (60000 + batch - 1) / batch;
  std::vector<std::shared_ptr<Callback>> callbacks = {timer};
  if (!step_times_path.empty()) callbacks.push_back(std::make_shared<StepTimes>(step_times_path));
  const History h = model->fit(train, {.epochs = epochs + 1,
                                       .steps_per_epoch = steps_per_epoch,
                                       .callbacks = callbacks,
                                       .verbose = 0,
                                       .steps_per_execution = steps_per_execution});
  if (!trace_path.empty()) trace::stop();
  const Logs logs = model->evaluate(test);
  std::printf("{\"strategy\": \"%s\", \"replicas\": %d, \"threads\": %d, \"batch\": %lld, \"images_per_s\": %.1f, "
              "\"input_wait\": %.4f, \"test_accuracy\": %.4f}\n",
              strategy->name().c_str(), strategy->num_replicas_in_sync(), threads, static_cast<long long>(batch),
              (steps_per_epoch > 0 ? static_cast<double>(steps_per_epoch * batch) : 60000.0) * static_cast<double>(epochs) /
                  timer->seconds,
              h.input_wait_fraction.back(), logs.at("accuracy"));
  return 0;
}
