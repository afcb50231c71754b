// Exact resume: a fit stopped at an epoch boundary or in the middle of an epoch (by an exception, as a
// crash would stop it) and resumed through BackupAndRestore in fresh objects (a new model and a new
// Dataset, as after a restart) ends with bitwise the weights of the run never stopped. The pipeline
// reshuffles every epoch, maps in parallel and prefetches; the model has dropout (the RNG) and Adam (slots).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "strata/io/checkpoint.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/random.h"
#include "strata/train/model.h"
#include "test_util.h"

namespace strata {
namespace {

// A BackupAndRestore whose backups stay when fit completes, so that a later fit resumes from them.
std::shared_ptr<callbacks::BackupAndRestore> kept_backup(const std::string& dir) {
  return std::make_shared<callbacks::BackupAndRestore>(dir, callbacks::BackupAndRestore::Options{.delete_checkpoint = false});
}

namespace fs = std::filesystem;

constexpr int64_t kExamples = 200, kBatch = 16;  // 13 steps an epoch (the last one short)
constexpr int64_t kEpochs = 3;

// A fresh pipeline each call, as a restarted process builds it: the same seeds, a new graph.
data::Dataset pipeline() {
  Generator gen(5);
  Tensor x = Tensor::empty({kExamples, 6});
  Tensor y = Tensor::empty({kExamples}, DType::kInt64);
  for (int64_t i = 0; i < kExamples; ++i) {
    const int64_t label = static_cast<int64_t>(gen.uniform_int(3));
    y.data<int64_t>()[i] = label;
    gen.fill_normal(x.data<float>() + i * 6, 6, 0.0f, 1.0f);
    x.data<float>()[i * 6 + label] += 1.5f;
  }
  return data::Dataset::from_tensor_slices({x, y})
      .shuffle(64, /*seed=*/9)
      .batch(kBatch)
      .map([](const data::Element& e) { return e; }, {.num_parallel_calls = 2})
      .prefetch(2);
}

std::shared_ptr<Sequential> model() {
  manual_seed(3);
  auto m = std::make_shared<Sequential>(
      std::vector<nn::LayerRef>{nn::Dense(12, "relu"), nn::Dropout(0.3f), nn::Dense(3)});
  m->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}),
             optim::Adam(optim::AdamOptions{.learning_rate = 0.01}), {"accuracy"});
  m->build_for({1, 6});
  return m;
}

FitOptions options(std::vector<std::shared_ptr<Callback>> callbacks, int64_t steps_per_execution = 1) {
  FitOptions o;
  o.epochs = kEpochs;
  o.callbacks = std::move(callbacks);
  o.verbose = 0;
  o.steps_per_execution = steps_per_execution;
  return o;
}

// Throws out of fit after `steps` global steps: a crash, after which nothing more is saved.
class CrashAt : public Callback {
 public:
  explicit CrashAt(int64_t steps) : steps_(steps) {}
  void on_train_batch_end(int64_t, const Logs&) override {
    if (model()->step() >= steps_) throw std::runtime_error("crash");
  }

 private:
  int64_t steps_;
};

void expect_bitwise_equal(const Model& expected, const Model& got) {
  const auto e = expected.named_weights(), g = got.named_weights();
  ASSERT_EQ(e.size(), g.size());
  for (size_t i = 0; i < e.size(); ++i) {
    ASSERT_EQ(e[i].first, g[i].first);
    ASSERT_EQ(e[i].second.nbytes(), g[i].second.nbytes());
    EXPECT_EQ(std::memcmp(e[i].second.raw_data(), g[i].second.raw_data(), e[i].second.nbytes()), 0)
        << "variable " << e[i].first << " differs";
  }
}

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("strata_resume_test_" + std::to_string(::getpid()));
  Scratch() { fs::remove_all(dir); }
  ~Scratch() { fs::remove_all(dir); }
};

TEST(ResumeTest, AtEveryEpochBoundaryEndsBitwiseEqual) {
  auto full = model();
  const History reference = full->fit(pipeline(), options({}));
  for (int64_t stop = 1; stop < kEpochs; ++stop) {
    Scratch scratch;
    auto first = model();
    FitOptions o = options({kept_backup(scratch.dir.string())});
    o.epochs = stop;
    first->fit(pipeline(), o);
    auto resumed = model();
    const History h =
        resumed->fit(pipeline(), options({kept_backup(scratch.dir.string())}));
    ASSERT_EQ(h.epochs.front(), stop);
    EXPECT_EQ(resumed->step(), full->step());
    expect_bitwise_equal(*full, *resumed);
    EXPECT_EQ(h.history.at("loss").back(), reference.history.at("loss").back());
  }
}

TEST(ResumeTest, InTheMiddleOfAnEpochLosesAtMostSaveFreqStepsAndEndsBitwiseEqual) {
  for (const int64_t steps_per_execution : {int64_t{1}, int64_t{3}}) {
    SCOPED_TRACE("steps_per_execution " + std::to_string(steps_per_execution));
    auto full = model();
    const History reference = full->fit(pipeline(), options({}, steps_per_execution));
    // Crash at global step 19 (epoch 2, step 6 of 13) with a backup every 4 steps (and at each epoch's end):
    // the last backup is global step 16, epoch 2's step 3, for groups of 1 step and of 3 (13 + 3) alike.
    Scratch scratch;
    callbacks::BackupAndRestore::Options backup{.restore = true, .max_to_keep = 3, .save_freq = 4};
    auto first = model();
    EXPECT_THROW(first->fit(pipeline(), options({std::make_shared<callbacks::BackupAndRestore>(scratch.dir.string(), backup),
                                                 std::make_shared<CrashAt>(19)},
                                                steps_per_execution)),
                 std::runtime_error);
    auto resumed = model();
    const History h = resumed->fit(
        pipeline(),
        options({std::make_shared<callbacks::BackupAndRestore>(scratch.dir.string(), backup)}, steps_per_execution));
    const FitPosition& at = resumed->restored_position();
    EXPECT_EQ(at.epochs_done, 1);
    EXPECT_GT(at.step_in_epoch, 0);
    EXPECT_FALSE(at.input_state.empty());
    EXPECT_GE(at.epochs_done * 13 + at.step_in_epoch, 19 - 4) << "lost more than save_freq steps";
    EXPECT_EQ(resumed->step(), full->step());
    expect_bitwise_equal(*full, *resumed);
    // The resumed epoch's running metrics went on from the checkpoint's: its logged loss is the same too.
    EXPECT_EQ(h.history.at("loss").front(), reference.history.at("loss")[1]);
    EXPECT_EQ(h.history.at("accuracy").back(), reference.history.at("accuracy").back());
  }
}

TEST(ResumeTest, WithStepsPerEpochTheIteratorThatLivesAcrossEpochsContinues) {
  // steps_per_epoch: one iterator over a repeated dataset runs through every epoch (Keras), so an epoch's
  // end is not a pass's end: 10 steps an epoch over passes of 13.
  auto repeated = [] { return pipeline().repeat(); };
  auto with = [](std::vector<std::shared_ptr<Callback>> callbacks) {
    FitOptions o = options(std::move(callbacks));
    o.steps_per_epoch = 10;
    return o;
  };
  auto full = model();
  full->fit(repeated(), with({}));
  Scratch scratch;
  callbacks::BackupAndRestore::Options backup{.restore = true, .max_to_keep = 3, .save_freq = 7};
  auto first = model();
  EXPECT_THROW(first->fit(repeated(), with({std::make_shared<callbacks::BackupAndRestore>(scratch.dir.string(), backup),
                                            std::make_shared<CrashAt>(23)})),
               std::runtime_error);
  auto resumed = model();
  resumed->fit(repeated(), with({std::make_shared<callbacks::BackupAndRestore>(scratch.dir.string(), backup)}));
  EXPECT_EQ(resumed->restored_position().epochs_done, 2);  // the backup at global step 21: epoch 3, step 1
  EXPECT_EQ(resumed->restored_position().step_in_epoch, 1);
  expect_bitwise_equal(*full, *resumed);
}

TEST(ResumeTest, NothingToResumeFromStartsAtTheFirstEpochAndSaysSo) {
  Scratch scratch;
  auto m = model();
  testing::internal::CaptureStdout();
  const History h = m->fit(pipeline(), options({kept_backup(scratch.dir.string())}));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(h.epochs.front(), 0);
  EXPECT_NE(out.find("No checkpoint to resume from in " + scratch.dir.string()), std::string::npos) << out;
}

TEST(ResumeTest, ADamagedCheckpointIsAnErrorAndIsNotWrittenOver) {
  Scratch scratch;
  auto first = model();
  FitOptions o = options({kept_backup(scratch.dir.string())});
  o.epochs = 1;
  first->fit(pipeline(), o);
  const fs::path manifest = scratch.dir / "ckpt-1" / "manifest.json";
  ASSERT_TRUE(fs::exists(manifest));
  fs::remove(manifest);
  auto resumed = model();
  EXPECT_THROW(
      resumed->fit(pipeline(), options({kept_backup(scratch.dir.string())})),
      DataCorrupt);
  EXPECT_EQ(resumed->step(), 0);
  EXPECT_FALSE(fs::exists(manifest)) << "the damaged checkpoint was written over";
  EXPECT_FALSE(fs::exists(scratch.dir / "ckpt-2"));
}

TEST(ResumeTest, AnotherDatasetThanTheCheckpointsIsAClearError) {
  Scratch scratch;
  auto first = model();
  FitOptions o = options({kept_backup(scratch.dir.string())});
  o.epochs = 1;
  first->fit(pipeline(), o);
  auto resumed = model();
  const data::Dataset unshuffled = data::Dataset::range(kExamples).batch(kBatch);
  const std::string msg = test::message_of<InvalidArgument>([&] {
    resumed->fit(unshuffled, options({kept_backup(scratch.dir.string())}));
  });
  EXPECT_NE(msg.find("the checkpoint's input position does not fit this dataset"), std::string::npos) << msg;
}

TEST(ResumeTest, BadSaveFreqIsAnError) {
  EXPECT_THROW(callbacks::BackupAndRestore("d", {.save_freq = -1}), InvalidArgument);
}

}  // namespace
}  // namespace strata
