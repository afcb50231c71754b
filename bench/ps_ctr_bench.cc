// ps_ctr_bench: examples/s of the click-through-rate model (an Embedding of --vocab rows x --dim over --features
// hashed ids, then Dense 64 relu and Dense 1 sigmoid) trained through parameter servers, with sparse pulls and pushes
// of the table's rows (RemoteTrainerOptions::sparse_embeddings) against dense ones (the whole table each way, each
// step). One process on 127.0.0.1: 2 ParameterServers (the table in 2 shards, one each), --workers RemoteTrainers on
// WorkerServers, a ClusterCoordinator scheduling their steps. The data: strata data ctr's generator (Zipf ids), in
// memory. Each mode runs rounds of two steps per worker for at least --seconds, after one warm-up step per worker; a
// line per mode (examples/s, ms per step, the rows the ps sent and applied per step; the best of --repeats rounds,
// the modes alternating), then the ratio.
//   ps_ctr_bench [--vocab 1000000] [--dim 32] [--features 26] [--batch 256] [--workers 1] [--seconds 4]
//                [--optimizer sgd|adam|adagrad] [--mode both|sparse|dense] [--repeats 1]
// Thread-safety: a program.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "strata/data/ctr.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/ps/cluster_coordinator.h"
#include "strata/random.h"
#include "strata/train/model.h"
#include "strata/ps/remote_trainer.h"

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;

struct Options {
  int64_t vocab = 1000000, dim = 32, features = 26, batch = 256, workers = 1;
  double seconds = 4;
  std::string optimizer = "sgd";
  std::string mode = "both";  // sparse, dense or both
  int64_t repeats = 1;        // rounds per mode; the best counts
};

std::shared_ptr<Sequential> ctr_model(const Options& o, uint64_t seed) {
  manual_seed(seed);
  auto model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Embedding(o.vocab, o.dim), nn::Flatten(),
                                                                      nn::Dense(64, "relu"), nn::Dense(1, "sigmoid")});
  model->compile(losses::BinaryCrossentropy(), optim::SGD(), {"accuracy"});
  model->build_for({1, o.features}, DType::kInt64);
  return model;
}

// Worker w's input: 16 batches of generated examples (its own), repeated by the trainer.
data::Dataset ctr_data(const Options& o, int64_t worker) {
  const data::CtrGenerator gen({.features = o.features, .vocab = o.vocab, .zipf = 1.05, .seed = 1});
  const int64_t rows = 16 * o.batch;
  Tensor x = Tensor::empty({rows, o.features}, DType::kInt64), y = Tensor::empty({rows}, DType::kInt64);
  for (int64_t i = 0; i < rows; ++i) {
    y.data<int64_t>()[i] = gen.example(data::CtrSplit::kTrain, worker * rows + i, x.data<int64_t>() + i * o.features);
  }
  return data::Dataset::from_tensor_slices({x, y}).batch(o.batch);
}

struct Result {
  double examples_per_s = 0, ms_per_step = 0, rows_pulled = 0, rows_pushed = 0, loss_first = 0, loss_last = 0;
  int64_t steps = 0;
};

Result run_mode(const Options& o, bool sparse) {
  ps::ParameterServer servers[2];
  std::vector<std::shared_ptr<ps::ParameterServerClient>> clients;
  for (ps::ParameterServer& s : servers) {
    s.start("127.0.0.1:0");
    clients.push_back(std::make_shared<ps::ParameterServerClient>("127.0.0.1:" + std::to_string(s.port()),
                                                                  std::chrono::seconds(120)));
  }
  const ps::FixedShardsPartitioner partitioner(2);
  ps::OptimizerSpec spec{.name = o.optimizer, .learning_rate = o.optimizer == "sgd" ? 0.1 : 0.01};
  {
    auto chief = ctr_model(o, 1);
    ps::create_model_variables(*chief, partitioner, clients, spec);
  }
  std::vector<std::shared_ptr<ps::RemoteTrainer>> trainers;
  std::vector<std::unique_ptr<ps::WorkerServer>> workers;
  std::vector<std::string> addresses;
  for (int64_t w = 0; w < o.workers; ++w) {
    trainers.push_back(std::make_shared<ps::RemoteTrainer>(
        ctr_model(o, 10 + static_cast<uint64_t>(w)), [&o](int64_t i) { return ctr_data(o, i); }, w, partitioner,
        clients, ps::RemoteTrainerOptions{.sparse_embeddings = sparse}));
    workers.push_back(std::make_unique<ps::WorkerServer>());
    trainers.back()->register_on(*workers.back());
    workers.back()->start("127.0.0.1:0");
    addresses.push_back("127.0.0.1:" + std::to_string(workers.back()->port()));
  }
  ps::ClusterCoordinator coordinator(addresses, {.first_step_id = 0});
  // Warm-up: one step per worker (first touches of memory, connections).
  std::vector<ps::RemoteValue> warmup;
  for (int64_t w = 0; w < o.workers; ++w) warmup.push_back(coordinator.schedule(ps::kTrainStep));
  coordinator.join();
  const int64_t pulled_before = servers[0].rows_pulled() + servers[1].rows_pulled();
  const int64_t pushed_before = servers[0].rows_pushed() + servers[1].rows_pushed();
  // Rounds of two steps per worker (each worker has its next step queued) until the time is up.
  const auto start = Clock::now();
  std::vector<ps::RemoteValue> values;
  double elapsed = 0;
  while (elapsed < o.seconds) {
    for (int64_t i = 0; i < 2 * o.workers; ++i) values.push_back(coordinator.schedule(ps::kTrainStep));
    coordinator.join();
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  const auto steps = static_cast<int64_t>(values.size());
  Result r;
  r.steps = steps;
  r.examples_per_s = static_cast<double>(steps * o.batch) / elapsed;
  r.ms_per_step = 1e3 * elapsed / static_cast<double>(steps);
  r.rows_pulled = static_cast<double>(servers[0].rows_pulled() + servers[1].rows_pulled() - pulled_before) /
                  static_cast<double>(steps);
  r.rows_pushed = static_cast<double>(servers[0].rows_pushed() + servers[1].rows_pushed() - pushed_before) /
                  static_cast<double>(steps);
  r.loss_first = ps::StepOutput::parse(warmup.front().fetch()).loss;
  r.loss_last = ps::StepOutput::parse(values.back().fetch()).loss;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--vocab")
      o.vocab = std::atoll(value.c_str());
    else if (flag == "--dim")
      o.dim = std::atoll(value.c_str());
    else if (flag == "--features")
      o.features = std::atoll(value.c_str());
    else if (flag == "--batch")
      o.batch = std::atoll(value.c_str());
    else if (flag == "--workers")
      o.workers = std::atoll(value.c_str());
    else if (flag == "--seconds")
      o.seconds = std::atof(value.c_str());
    else if (flag == "--optimizer")
      o.optimizer = value;
    else if (flag == "--mode")
      o.mode = value;
    else if (flag == "--repeats")
      o.repeats = std::atoll(value.c_str());
    else {
      std::fprintf(stderr,
                   "usage: ps_ctr_bench [--vocab 1000000] [--dim 32] [--features 26] [--batch 256] [--workers 1] "
                   "[--seconds 4] [--optimizer sgd|adam|adagrad] [--mode both|sparse|dense] [--repeats 1]\n");
      return 2;
    }
  }
  if ((argc - 1) % 2 != 0 || o.vocab < 1 || o.dim < 1 || o.features < 1 || o.batch < 1 || o.workers < 1 ||
      o.repeats < 1 || !(o.seconds > 0) || (o.mode != "both" && o.mode != "sparse" && o.mode != "dense")) {
    std::fprintf(stderr, "ps_ctr_bench: every flag takes one positive value\n");
    return 2;
  }
  std::printf(
      "ctr model: Embedding %lld x %lld (%.0f MB) over %lld ids, Dense 64, Dense 1; batch %lld, %lld worker%s, "
      "2 ps, %s on the ps\n",
      static_cast<long long>(o.vocab), static_cast<long long>(o.dim), static_cast<double>(o.vocab * o.dim * 4) / 1e6,
      static_cast<long long>(o.features), static_cast<long long>(o.batch), static_cast<long long>(o.workers),
      o.workers == 1 ? "" : "s", o.optimizer.c_str());
  std::fflush(stdout);
  Result results[2];
  for (int64_t round = 0; round < o.repeats; ++round) {  // the modes alternate; each keeps its best round
    for (int mode = 0; mode < 2; ++mode) {
      const bool sparse = mode == 0;
      if (o.mode != "both" && o.mode != (sparse ? "sparse" : "dense")) continue;
      const Result r = run_mode(o, sparse);
      if (r.examples_per_s > results[mode].examples_per_s) results[mode] = r;
    }
  }
  for (int mode = 0; mode < 2; ++mode) {
    const bool sparse = mode == 0;
    if (o.mode != "both" && o.mode != (sparse ? "sparse" : "dense")) continue;
    const Result& r = results[mode];
    std::printf(
        "%-6s %9.1f examples/s  %8.1f ms/step  rows per step: %.0f pulled, %.0f pushed  (%lld steps; loss "
        "%.3g -> %.3g)\n",
        sparse ? "sparse" : "dense", r.examples_per_s, r.ms_per_step, r.rows_pulled, r.rows_pushed,
        static_cast<long long>(r.steps), r.loss_first, r.loss_last);
    std::fflush(stdout);
  }
  if (o.mode == "both") {
    std::printf("sparse / dense: %.1fx examples/s\n", results[0].examples_per_s / results[1].examples_per_s);
  }
  return 0;
}
