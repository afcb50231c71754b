// The job file's validation data and Keras callbacks (src/cli/job_callbacks.h), end to end: a validation split is
// exactly the last fraction of the training records, val_ values reach the progress bar, the CSV log and
// TensorBoard's validation run; early_stopping, model_checkpoint and reduce_lr_on_plateau act alike on one device,
// mirrored replicas and two worker processes, where only the chief prints and writes; and the checks at load time.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "cli/job.h"
#include "cli/ps_job_util.h"
#include "strata/error.h"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

// Copies the last `count` records of IDX files `from_prefix` in `from` to `to_prefix` files in `to`.
void write_idx_tail(const fs::path& from, const std::string& from_prefix, const fs::path& to,
                    const std::string& to_prefix, uint32_t count) {
  for (const auto& [kind, header, record] :
       std::vector<std::tuple<std::string, size_t, size_t>>{{"-images-idx3-ubyte", 16, 28 * 28}, {"-labels-idx1-ubyte", 8, 1}}) {
    std::ifstream in(from / (from_prefix + kind), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string out = bytes.substr(0, header);
    for (int i = 0; i < 4; ++i) out[4 + i] = static_cast<char>((count >> (8 * (3 - i))) & 0xff);  // the count
    out += bytes.substr(bytes.size() - count * record);
    std::ofstream(to / (to_prefix + kind), std::ios::binary) << out;
  }
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

TEST(JobCallbacksTest, ValidationSplitIsTheLastFractionOfTheTrainingRecords) {
  Scratch s("val_split");
  const fs::path whole = s.dir / "whole", head = s.dir / "head", tail = s.dir / "tail";
  for (const fs::path& d : {whole, head, tail}) fs::create_directories(d);
  write_tiny_idx(whole, "train", 512, 1);
  write_tiny_idx(whole, "t10k", 64, 2);
  write_tiny_idx(head, "train", 384, 1);  // the same generator: the first 384 of whole's records
  write_tiny_idx(head, "t10k", 64, 2);
  write_idx_tail(whole, "train", tail, "t10k", 128);

  const std::string split_job = write_job(whole, tiny_job(whole) + "validation: {split: 0.25}\n");
  const std::string source_job =
      write_job(head, tiny_job(head) + "validation: {format: idx, directory: " + tail.string() + "}\n");
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + split_job + " --threads 1 --verbose 2 --csv-log " +
                       (s.dir / "split.csv").string() + " --log-dir " + (s.dir / "tb").string());
  ASSERT_EQ(rc, 0) << out;
  auto [rc2, out2] = run(std::string(STRATA_BINARY) + " train " + source_job + " --threads 1 --csv-log " +
                         (s.dir / "source.csv").string());
  ASSERT_EQ(rc2, 0) << out2;

  const std::string split_csv = read_file(s.dir / "split.csv");
  EXPECT_EQ(split_csv.rfind("epoch,loss,accuracy,val_loss,val_accuracy\n", 0), 0u) << split_csv;
  EXPECT_EQ(split_csv, read_file(s.dir / "source.csv")) << "training on the first 384 and validating on the last 128";
  EXPECT_NE(out.find("examples trained per epoch: 384 384"), std::string::npos) << out;
  EXPECT_NE(out.find(" - val_loss: "), std::string::npos) << "the progress bar shows it\n" << out;
  // TensorBoard's validation run, which the report page draws dashed.
  ASSERT_TRUE(fs::is_directory(s.dir / "tb" / "validation")) << out;
  EXPECT_FALSE(fs::is_empty(s.dir / "tb" / "validation"));
}

// A job whose callbacks act on the second epoch whatever the numbers: nothing improves by 100.
std::string callbacks_job(const fs::path& dir) {
  return tiny_job(dir) +
         "validation: {split: 0.25}\n"
         "early_stopping: {monitor: val_loss, min_delta: 100, patience: 1}\n"
         "reduce_lr_on_plateau: {monitor: val_loss, min_delta: 100, patience: 1, factor: 0.5}\n"
         "model_checkpoint: {filepath: \"" + (dir / "best" / "w-{epoch:02d}.safetensors").string() +
         "\", save_best_only: true, monitor: val_loss}\n";
}

void expect_callbacks_acted_once(const fs::path& dir, const std::string& out) {
  EXPECT_NE(out.find("training ended after epoch 2 of 5"), std::string::npos) << out;
  EXPECT_EQ(count_of(out, "Epoch 2: early stopping"), 1u) << out;
  EXPECT_EQ(count_of(out, "Epoch 2: ReduceLROnPlateau reducing learning rate to 0.005."), 1u) << out;
  // Epoch 1 always saves; epoch 2 saves if val_loss went down at all (best-only compares without min_delta).
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir / "best")) files.push_back(e.path().filename().string());
  EXPECT_EQ(files.size(), count_of(out, ": saved weights to ")) << out;
  EXPECT_TRUE(fs::exists(dir / "best" / "w-01.safetensors")) << out;
}

TEST(JobCallbacksTest, CallbacksActOnOneDeviceAndOnMirroredReplicas) {
  for (const std::string strategy : {"one_device", "mirrored --replicas 2"}) {
    TinyJob t("callbacks_" + strategy.substr(0, 8));
    const std::string job = write_job(t.s.dir, callbacks_job(t.s.dir));
    auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + job + " --threads 2 --epochs 5 --strategy " + strategy);
    ASSERT_EQ(rc, 0) << out;
    SCOPED_TRACE(strategy);
    expect_callbacks_acted_once(t.s.dir, out);
  }
}

TEST(JobCallbacksTest, CallbacksActAlikeOnTwoWorkersAndOnlyTheChiefWrites) {
  TinyJob t("callbacks_workers");
  const std::string job = write_job(t.s.dir, callbacks_job(t.s.dir));
  auto [rc, out] = run("timeout -k 5 120 " + std::string(STRATA_BINARY) + " launch --workers 2 -- " STRATA_BINARY
                       " train " + job + " --epochs 5 --strategy multi_worker_mirrored");
  ASSERT_EQ(rc, 0) << out;
  expect_callbacks_acted_once(t.s.dir, out);
  EXPECT_EQ(count_of(out, "[worker:1] Epoch 2: early stopping"), 0u) << "the chief prints\n" << out;
  EXPECT_EQ(worker_test_lines(out).size(), 2u) << "both workers stopped at the same epoch and finished\n" << out;
}

TEST(JobCallbacksTest, ModelCheckpointsDirectoryIsCheckedBeforeTraining) {
  TinyJob t("callbacks_path");
  std::ofstream(t.s.dir / "a_file") << "x";
  const std::string job =
      write_job(t.s.dir, tiny_job(t.s.dir) + "model_checkpoint: {filepath: \"" +
                             (t.s.dir / "a_file" / "w.safetensors").string() + "\", monitor: loss}\n");
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + job + " --threads 1");
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("model_checkpoint.filepath"), std::string::npos) << out;
  EXPECT_EQ(out.find("Epoch 1"), std::string::npos) << "refused before training\n" << out;
}

// Under parameter_server the chief validates on its copy of the trained weights (pulled at each epoch's end), stops
// the workers' steps with its fit and writes the checkpoints; ps tasks and workers print none of it.
TEST(JobCallbacksTest, EarlyStoppingAndCheckpointsRunOnAParameterServerChief) {
  TinyJob t("callbacks_ps_chief");
  write_job(t.s.dir, tiny_job(t.s.dir) +
                         "validation: {split: 0.25}\n"
                         "early_stopping: {monitor: val_loss, min_delta: 100, patience: 1}\n"
                         "model_checkpoint: {filepath: \"" + (t.s.dir / "best" / "w-{epoch:02d}.safetensors").string() +
                         "\", save_best_only: true, monitor: val_loss}\n");
  const auto [rc, out] = launch(t, 2, "--epochs 5", "", "", 0, /*ps=*/1);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[chief:0] training ended after epoch 2 of 5"), std::string::npos) << out;
  EXPECT_EQ(count_of(out, "Epoch 2: early stopping"), 1u) << out;
  EXPECT_EQ(count_of(out, "[chief:0] Epoch 2: early stopping"), 1u) << out;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(t.s.dir / "best")) files.push_back(e.path().filename().string());
  EXPECT_EQ(files.size(), count_of(out, ": saved weights to ")) << out;
  EXPECT_EQ(count_of(out, ": saved weights to "), count_of(out, "[chief:0] Epoch 1: saved weights to ") +
                                                     count_of(out, "[chief:0] Epoch 2: saved weights to "))
      << "the chief alone saves\n" << out;
  EXPECT_TRUE(fs::exists(t.s.dir / "best" / "w-01.safetensors")) << out;
}

// The ps tasks apply the rate the chief's steps carry; a schedule would need the chief to step it.
TEST(JobCallbacksTest, ParameterServerRefusesALearningRateSchedule) {
  TinyJob t("schedule_ps");
  std::string text = tiny_job(t.s.dir);
  const std::string adam = "optimizer: {name: adam, learning_rate: 0.01}";
  text.replace(text.find(adam), adam.size(),
               "optimizer: {name: adam, learning_rate: 0.01, schedule: {name: cosine_decay, warmup_epochs: 0.5}}");
  const std::string job = write_job(t.s.dir, text);
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + job + " --strategy parameter_server");
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("optimizer.schedule: not supported under parameter_server"), std::string::npos) << out;
}

// load_job checks each section where it is read, naming the file, the line and the key.
TEST(JobCallbacksTest, LoadTimeChecksNameTheFileLineAndKey) {
  Scratch s("callbacks_checks");
  auto message = [&](const std::string& extra) {
    const std::string path = write_job(s.dir, tiny_job(s.dir) + extra);
    try {
      load_job(path);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  // tiny_job has 12 lines: the extra section is on line 13.
  EXPECT_NE(message("early_stopping: {monitor: val_loss}\n").find("job.yaml:13: early_stopping.monitor: 'val_loss' "
                                                                  "needs validation data"),
            std::string::npos);
  EXPECT_NE(message("validation: {split: 0.1}\nearly_stopping: {monitor: val_recall}\n")
                .find("early_stopping.monitor: 'val_recall' is not in the epoch's logs"),
            std::string::npos);
  EXPECT_NE(message("validation: {split: 1.5}\n").find("validation.split: must be a finite number in (0, 1), got 1.5"),
            std::string::npos);
  EXPECT_NE(message("validation: {split: 0.1, format: idx}\n").find("give split"), std::string::npos);
  EXPECT_NE(message("validation: {format: tfrecord, files: [x]}\n").find("must be the training data's format"),
            std::string::npos);
  EXPECT_NE(message("reduce_lr_on_plateau: {monitor: loss, factor: 1}\n").find("reduce_lr_on_plateau.factor"),
            std::string::npos);
  EXPECT_NE(message("early_stopping: {monitor: loss, mode: bigger}\n").find("mode must be auto, min or max"),
            std::string::npos);
  EXPECT_NE(message("model_checkpoint: {filepath: w.safetensors, monitor: loss, save_best: true}\n")
                .find("unknown key 'model_checkpoint.save_best'"),
            std::string::npos);

  const Job job = load_job(write_job(
      s.dir, tiny_job(s.dir) + "validation: {split: 0.2}\n"
                               "early_stopping: {monitor: val_accuracy, patience: 3, min_delta: 0.01, baseline: 0.5, "
                               "restore_best_weights: true, mode: max}\n"
                               "reduce_lr_on_plateau: {cooldown: 2, min_lr: 0.0001, verbose: 0}\n"));
  EXPECT_DOUBLE_EQ(job.validation.split, 0.2);
  ASSERT_TRUE(job.callbacks.early_stopping);
  EXPECT_EQ(job.callbacks.early_stopping->monitor, "val_accuracy");
  EXPECT_EQ(job.callbacks.early_stopping->patience, 3);
  EXPECT_DOUBLE_EQ(job.callbacks.early_stopping->min_delta, 0.01);
  EXPECT_EQ(job.callbacks.early_stopping->baseline, 0.5);
  EXPECT_TRUE(job.callbacks.early_stopping->restore_best_weights);
  EXPECT_EQ(job.callbacks.early_stopping->mode, callbacks::Mode::kMax);
  ASSERT_TRUE(job.callbacks.reduce_lr_on_plateau);
  EXPECT_EQ(job.callbacks.reduce_lr_on_plateau->monitor, "val_loss");  // Keras's defaults where not given
  EXPECT_DOUBLE_EQ(job.callbacks.reduce_lr_on_plateau->factor, 0.1);
  EXPECT_EQ(job.callbacks.reduce_lr_on_plateau->patience, 10);
  EXPECT_EQ(job.callbacks.reduce_lr_on_plateau->cooldown, 2);
  EXPECT_EQ(job.callbacks.reduce_lr_on_plateau->verbose, 0);
  EXPECT_FALSE(job.callbacks.model_checkpoint);
  EXPECT_NE(job_fingerprint(job).at("callbacks").find("early_stopping"), std::string::npos)
      << "workers must agree on them";
}

}  // namespace
}  // namespace strata::cli
