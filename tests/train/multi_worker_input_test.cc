// How MultiWorkerMirroredStrategy's workers read a dataset of global batches (strata/distribute/input.h), with
// workers as threads of this process: under the FILE policy each reads its own files and its share of every
// global batch, shards of unequal size never deadlock (all workers make the same number of steps; one whose shard
// ended takes part with empty batches), every example is trained on exactly once an epoch, and the weights are
// those one process gets on the same global batches. OFF and custom loops too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "multi_worker_test_util.h"
#include "strata/data/autoshard.h"
#include "strata/data/csv.h"
#include "strata/nn/nn.h"
#include "strata/ops.h"
#include "strata/train/callbacks.h"
#include "strata/train/model.h"
#include "test_util.h"

namespace strata::distribute {
namespace {

namespace fs = std::filesystem;
using test_workers::on_every_worker;

constexpr int64_t kRows = 36, kGlobalBatch = 8;
// Three files of unequal size: with 2 workers, worker 0 reads files 0 and 2 (29 rows), worker 1 file 1 (7 rows).
constexpr int64_t kFileRows[] = {20, 7, 9};

class CsvShards {
 public:
  CsvShards() : dir_(fs::temp_directory_path() / ("strata_mw_input_" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    int64_t id = 0;
    for (size_t f = 0; f < std::size(kFileRows); ++f) {
      files_.push_back((dir_ / ("part-" + std::to_string(f) + ".csv")).string());
      std::ofstream out(files_.back());
      for (int64_t r = 0; r < kFileRows[f]; ++r, ++id) {
        out << id;
        for (int c = 0; c < 4; ++c) out << "," << std::sin(0.7 * static_cast<double>(id) + c);
        out << "," << (id * 5 + 1) % 3 << "\n";
      }
    }
  }
  ~CsvShards() { fs::remove_all(dir_); }

  // The examples of `files` as (x [4] float32, y int64), counting in seen[id] each example read.
  data::Dataset examples(const std::vector<std::string>& files) const {
    std::vector<data::CsvColumn> columns = {data::CsvColumn::required(data::CsvType::kInt64)};
    for (int c = 0; c < 4; ++c) columns.push_back(data::CsvColumn::required(data::CsvType::kFloat32));
    columns.push_back(data::CsvColumn::required(data::CsvType::kInt64));
    std::atomic<int>* seen = seen_;
    return data::CsvDataset(files, columns).map([seen](const data::Element& e) {
      seen[e[0].item<int64_t>()].fetch_add(1);
      Tensor x = Tensor::empty({4}, DType::kFloat32);
      for (int c = 0; c < 4; ++c) x.data<float>()[c] = e[static_cast<size_t>(1 + c)].item<float>();
      return data::Element({x, e[5]});
    });
  }
  const std::vector<std::string>& files() const { return files_; }
  // How often each example was read since the last reset.
  std::vector<int> seen() const {
    std::vector<int> out;
    for (int64_t i = 0; i < kRows; ++i) out.push_back(seen_[i].load());
    return out;
  }
  void reset_seen() {
    for (auto& s : seen_) s.store(0);
  }

 private:
  fs::path dir_;
  std::vector<std::string> files_;
  mutable std::atomic<int> seen_[kRows] = {};
};

Sequential make_model(uint64_t seed) {
  manual_seed(seed);
  Sequential model({nn::Dense(8, "relu"), nn::Dense(3)});
  model.build_for({1, 4});
  model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}),
                optim::SGD({.learning_rate = 0.2, .momentum = 0.9f}), {"accuracy"});
  return model;
}

struct Result {
  std::vector<std::vector<float>> weights;
  History history;
  int64_t steps = 0;
};

Result result_of(Sequential& model, History history) {
  Result r{{}, std::move(history), model.step()};
  for (auto& [name, t] : model.named_weights()) r.weights.push_back(t.to_vector<float>());
  return r;
}

// The global batches 2 FILE-sharded workers make together: step k joins worker 0's batch k (files 0 and 2, in
// batches of 4) and worker 1's (file 1), while either has one.
std::vector<data::Element> joined_global_batches(const CsvShards& shards) {
  const auto& f = shards.files();
  data::Iterator a = shards.examples({f[0], f[2]}).batch(kGlobalBatch / 2).make_iterator();
  data::Iterator b = shards.examples({f[1]}).batch(kGlobalBatch / 2).make_iterator();
  std::vector<data::Element> out;
  while (true) {
    std::optional<data::Element> x = a.next(), y = b.next();
    if (!x && !y) break;
    if (!x || !y) {
      out.push_back(x ? *x : *y);
      continue;
    }
    out.push_back(data::Element({concat({Variable((*x)[0]), Variable((*y)[0])}, 0).value(),
                                 concat({Variable((*x)[1]), Variable((*y)[1])}, 0).value()}));
  }
  return out;
}

TEST(MultiWorkerInputTest, FileShardsOfUnequalSizeTrainEveryExampleOnceAndGiveWhatOneProcessGives) {
  CsvShards shards;
  const std::vector<data::Element> global = joined_global_batches(shards);
  ASSERT_EQ(global.size(), 8u);  // worker 0's 29 rows make 8 batches of 4; worker 1's 7 rows make 2
  const data::Dataset reference_data = data::Dataset::from_generator([global] {
    auto next = std::make_shared<size_t>(0);
    return std::function<std::optional<data::Element>()>([global, next]() -> std::optional<data::Element> {
      if (*next >= global.size()) return std::nullopt;
      return global[(*next)++];
    });
  });
  Sequential reference_model = make_model(3);
  const Result reference = result_of(reference_model, reference_model.fit(reference_data, {.epochs = 2, .verbose = 0}));

  const data::Dataset dataset = shards.examples(shards.files()).batch(kGlobalBatch);
  for (const int local : {1, 2}) {
    SCOPED_TRACE(std::to_string(local) + " local replicas per worker");
    shards.reset_seen();
    std::vector<Result> results(2);
    on_every_worker(2, local, [&](int w, MultiWorkerMirroredStrategy& strategy) {
      auto scope = strategy.scope();
      Sequential model = make_model(3 + static_cast<uint64_t>(w));
      const History history = model.fit(dataset, {.epochs = 2, .verbose = 0});  // AUTO: 3 files, 2 workers -> FILE
      results[static_cast<size_t>(w)] = result_of(model, history);
    });
    if (HasFatalFailure()) return;
    EXPECT_EQ(shards.seen(), std::vector<int>(kRows, 2)) << "every example once an epoch, by one worker";
    for (int w = 0; w < 2; ++w) {
      const Result& r = results[static_cast<size_t>(w)];
      EXPECT_EQ(r.steps, reference.steps) << "worker " << w;
      ASSERT_EQ(r.weights.size(), reference.weights.size());
      for (size_t i = 0; i < r.weights.size(); ++i) {
        for (size_t k = 0; k < r.weights[i].size(); ++k) {
          const float want = reference.weights[i][k];
          ASSERT_NEAR(r.weights[i][k], want, 1e-5f * std::max(1.0f, std::fabs(want))) << "weight " << i << " " << k;
        }
      }
      for (const char* key : {"loss", "accuracy"}) {
        for (size_t e = 0; e < 2; ++e) {
          EXPECT_NEAR(r.history.history.at(key)[e], reference.history.history.at(key)[e], 1e-5) << key << " " << e;
        }
      }
    }
  }
}

// Ends fit (as a killed job would) once the model has made `step` steps.
class StopAtStep : public Callback {
 public:
  explicit StopAtStep(int64_t step) : step_(step) {}
  void on_train_batch_end(int64_t, const Logs&) override {
    if (model()->step() >= step_) throw std::runtime_error("stopped at step " + std::to_string(step_));
  }

 private:
  int64_t step_;
};

TEST(MultiWorkerInputTest, AResumeMidEpochContinuesEveryWorkersOwnShardAndTheJobsMetrics) {
  CsvShards shards;
  const data::Dataset dataset = shards.examples(shards.files()).batch(kGlobalBatch);
  const fs::path backup = fs::temp_directory_path() / ("strata_mw_input_backup_" + std::to_string(::getpid()));
  fs::remove_all(backup);
  auto run = [&](MultiWorkerMirroredStrategy& strategy, std::shared_ptr<Callback> stop) {
    auto scope = strategy.scope();
    Sequential model = make_model(3);
    std::vector<std::shared_ptr<Callback>> callbacks = {std::make_shared<callbacks::BackupAndRestore>(
        backup.string(), callbacks::BackupAndRestore::Options{.save_freq = 3})};
    if (stop) callbacks.push_back(stop);
    const History history = model.fit(dataset, {.epochs = 2, .callbacks = callbacks, .verbose = 0});
    return result_of(model, history);
  };
  std::vector<Result> uninterrupted(2), resumed(2);
  on_every_worker(2, 1, [&](int w, MultiWorkerMirroredStrategy& strategy) {
    uninterrupted[static_cast<size_t>(w)] = run(strategy, nullptr);
  });
  ASSERT_FALSE(fs::exists(backup)) << "the backup is deleted when fit completes";
  // Stopped after step 7 of epoch 1 (8 steps): the backup of step 6 holds both workers' positions in their files.
  on_every_worker(2, 1, [&](int, MultiWorkerMirroredStrategy& strategy) {
    EXPECT_THROW(run(strategy, std::make_shared<StopAtStep>(7)), std::runtime_error);
  });
  ASSERT_TRUE(fs::exists(backup));
  on_every_worker(2, 1, [&](int w, MultiWorkerMirroredStrategy& strategy) {
    resumed[static_cast<size_t>(w)] = run(strategy, nullptr);
  });
  fs::remove_all(backup);
  if (HasFatalFailure()) return;
  for (int w = 0; w < 2; ++w) {
    SCOPED_TRACE("worker " + std::to_string(w));
    const Result &a = uninterrupted[static_cast<size_t>(w)], &b = resumed[static_cast<size_t>(w)];
    EXPECT_EQ(b.steps, a.steps);
    ASSERT_EQ(a.weights.size(), b.weights.size());
    for (size_t i = 0; i < a.weights.size(); ++i) {
      for (size_t k = 0; k < a.weights[i].size(); ++k) {
        ASSERT_NEAR(b.weights[i][k], a.weights[i][k], 1e-5f * std::max(1.0f, std::fabs(a.weights[i][k])))
            << "weight " << i << " " << k;
      }
    }
    // Epoch 1's logs were resumed from the backup's metric states: the job's, not the chief's share twice.
    for (const char* key : {"loss", "accuracy"}) {
      ASSERT_EQ(b.history.history.at(key).size(), 2u) << key;
      for (size_t e = 0; e < 2; ++e) {
        EXPECT_NEAR(b.history.history.at(key)[e], a.history.history.at(key)[e], 1e-5) << key << " " << e;
      }
    }
  }
}

// Steps, and rows per worker and per global batch, one epoch of a custom loop over the distributed dataset.
struct Walk {
  int64_t steps = 0, my_rows = 0, global_rows = 0;
};

Walk walk(Strategy& strategy, const data::Dataset& dataset) {
  Walk walk;
  DistributedIterator it = strategy.experimental_distribute_dataset(dataset).make_iterator();
  while (auto batch = it.next()) {
    ++walk.steps;
    walk.global_rows += it.last_global_batch_size();
    for (const data::Element& part : batch->values()) walk.my_rows += batch_rows(part);
  }
  return walk;
}

TEST(MultiWorkerInputTest, ACustomLoopMakesTheSameStepsOnEveryWorkerWhateverTheirShards) {
  CsvShards shards;
  const data::Dataset dataset = shards.examples(shards.files()).batch(kGlobalBatch);
  std::vector<Walk> file(2), off(2), by_data(2);
  on_every_worker(2, 1, [&](int w, MultiWorkerMirroredStrategy& strategy) {
    file[static_cast<size_t>(w)] = walk(strategy, dataset.with_options({data::AutoShardPolicy::kFile}));
    off[static_cast<size_t>(w)] = walk(strategy, dataset.with_options({data::AutoShardPolicy::kOff}));
    by_data[static_cast<size_t>(w)] = walk(strategy, dataset.with_options({data::AutoShardPolicy::kData}));
  });
  if (HasFatalFailure()) return;
  for (int w = 0; w < 2; ++w) {
    SCOPED_TRACE("worker " + std::to_string(w));
    // FILE: worker 0 reads 29 rows, worker 1 7, both make the 8 steps worker 0 needs; 36 rows in all.
    EXPECT_EQ(file[static_cast<size_t>(w)].steps, 8);
    EXPECT_EQ(file[static_cast<size_t>(w)].my_rows, w == 0 ? 29 : 7);
    EXPECT_EQ(file[static_cast<size_t>(w)].global_rows, kRows);
    // OFF: each worker reads all 36 rows in batches of 4: 9 steps of 8 rows (every example twice an epoch).
    EXPECT_EQ(off[static_cast<size_t>(w)].steps, 9);
    EXPECT_EQ(off[static_cast<size_t>(w)].my_rows, kRows);
    EXPECT_EQ(off[static_cast<size_t>(w)].global_rows, 2 * kRows);
    // DATA: both read the 5 global batches (8, 8, 8, 8, 4 rows) and keep half of each.
    EXPECT_EQ(by_data[static_cast<size_t>(w)].steps, 5);
    EXPECT_EQ(by_data[static_cast<size_t>(w)].my_rows, kRows / 2);
    EXPECT_EQ(by_data[static_cast<size_t>(w)].global_rows, kRows);
  }
}

TEST(MultiWorkerInputTest, AFilePolicyThatCannotApplyIsAClearErrorAndAutoFallsBackToData) {
  std::vector<std::string> file_error(2);
  std::vector<Walk> automatic(2);
  on_every_worker(2, 1, [&](int w, MultiWorkerMirroredStrategy& strategy) {
    const data::Dataset ranges = data::Dataset::range(10).batch(4);  // no files
    file_error[static_cast<size_t>(w)] = test::message_of<InvalidArgument>(
        [&] { strategy.experimental_distribute_dataset(ranges.with_options({data::AutoShardPolicy::kFile})); });
    automatic[static_cast<size_t>(w)] = walk(strategy, ranges);
  });
  if (HasFatalFailure()) return;
  for (int w = 0; w < 2; ++w) {
    EXPECT_NE(file_error[static_cast<size_t>(w)].find("no file source"), std::string::npos) << file_error[0];
    EXPECT_EQ(automatic[static_cast<size_t>(w)].steps, 3);  // DATA: the 3 global batches, half of each
    EXPECT_EQ(automatic[static_cast<size_t>(w)].global_rows, 10);
  }
}

}  // namespace
}  // namespace strata::distribute
