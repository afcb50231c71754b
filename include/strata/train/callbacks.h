// Callbacks: hooks that Model::fit / evaluate / predict call at the edges of training, epochs and batches,
// as in Keras. Logs carry the named numbers of the moment (loss, metrics, val_*), in display order.
//
//   model.fit(train, {.epochs = 10, .callbacks = {std::make_shared<callbacks::EarlyStopping>(
//                                                     callbacks::EarlyStopping::Options{.patience = 2})}});
//
// Thread-safety: a callback is driven by the one thread that runs fit; do not share one between fits that
// run at the same time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "strata/tensor.h"

namespace strata {

class Model;

// Named values in insertion order ("loss", "accuracy", "val_loss", ...).
class Logs {
 public:
  void set(const std::string& name, double value);
  std::optional<double> get(const std::string& name) const;
  bool contains(const std::string& name) const { return get(name).has_value(); }
  // REQUIRES: contains(name); otherwise an InvalidArgument listing the names present.
  double at(const std::string& name) const;
  const std::vector<std::pair<std::string, double>>& items() const { return items_; }
  bool empty() const { return items_.empty(); }

 private:
  std::vector<std::pair<std::string, double>> items_;
};

class Callback {
 public:
  virtual ~Callback() = default;
  void set_model(Model* model) { model_ = model; }
  Model* model() const { return model_; }

  virtual void on_train_begin(const Logs&) {}
  virtual void on_train_end(const Logs&) {}
  virtual void on_epoch_begin(int64_t /*epoch*/, const Logs&) {}
  // Logs hold the epoch's training results and, when validated, "val_"-prefixed ones.
  virtual void on_epoch_end(int64_t /*epoch*/, const Logs&) {}
  virtual void on_train_batch_begin(int64_t /*batch*/, const Logs&) {}
  // Logs hold the running averages of the epoch so far.
  virtual void on_train_batch_end(int64_t /*batch*/, const Logs&) {}
  virtual void on_test_begin(const Logs&) {}
  virtual void on_test_end(const Logs&) {}
  virtual void on_test_batch_end(int64_t /*batch*/, const Logs&) {}
  virtual void on_predict_begin(const Logs&) {}
  virtual void on_predict_end(const Logs&) {}

 private:
  Model* model_ = nullptr;
};

namespace callbacks {

// Keras's `mode`: whether a monitored quantity improves by going down or up. kAuto decides as Keras 3's
// MonitorCallback does (EarlyStopping, ModelCheckpoint): "loss" and "val_loss" go down; any other name, with
// "val_" removed, must be one of the compiled metrics, whose direction (metrics::Metric::direction) says; a name
// neither covers is an InvalidArgument when training begins (give mode min or max). ReduceLROnPlateau keeps
// Keras's own rule: up when the name contains "acc", down otherwise.
enum class Mode { kAuto, kMin, kMax };
// "auto", "min" or "max" (InvalidArgument otherwise, naming `what`).
Mode parse_mode(const std::string& text, const std::string& what);
// kMin or kMax for `monitor` as Keras 3's MonitorCallback resolves `mode` on `model` (see Mode).
Mode resolve_mode(Mode mode, const std::string& monitor, const Model& model, const char* callback);

// The Keras progress bar. On a terminal it redraws one line per epoch with the step count, a bar, the
// rate, the ETA and the running loss and metrics; otherwise (a pipe or a file) it prints one line per
// epoch when the epoch ends. The epoch line ends with how long the steps waited for input.
class ProgressBar : public Callback {
 public:
  struct Options {
    // 1: a live bar on a terminal, a line per epoch otherwise; 2: a line per epoch always.
    int verbose = 1;
    // Where to write; stdout by default. Tests pass a stream.
    std::FILE* out = nullptr;
    // Force the terminal (true) or line (false) form; by default isatty(out) decides.
    std::optional<bool> terminal;
  };
  explicit ProgressBar(Options options);
  ProgressBar() : ProgressBar(Options{}) {}

  // How many steps an epoch has (0: unknown); fit sets it from the dataset's cardinality.
  void set_steps(int64_t steps) { steps_ = steps; }
  void set_epochs(int64_t epochs) { epochs_ = epochs; }
  // For evaluate: a one-line summary ends the run instead of an epoch.
  void set_mode_evaluate(bool evaluate) { evaluate_ = evaluate; }

  void on_epoch_begin(int64_t epoch, const Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  void on_epoch_end(int64_t epoch, const Logs& logs) override;
  void on_test_begin(const Logs& logs) override;
  void on_test_batch_end(int64_t batch, const Logs& logs) override;
  void on_test_end(const Logs& logs) override;

 private:
  void begin_run();
  void update(int64_t done, const Logs& logs, bool final);
  std::string values(const Logs& logs, bool skip_val) const;

  Options options_;
  bool terminal_ = false;
  bool evaluate_ = false;
  bool in_fit_ = false;
  int64_t steps_ = 0, epochs_ = 0;
  double start_ = 0, last_draw_ = 0;
  int64_t seen_ = 0;
};

// Appends one row per epoch to a CSV file: epoch, then each log value (a header on the first row).
class CSVLogger : public Callback {
 public:
  struct Options {
    std::string separator = ",";
    bool append = false;  // keep the file's rows and add to them (for a resumed run)
  };
  explicit CSVLogger(std::string filename, Options options);
  explicit CSVLogger(std::string filename) : CSVLogger(std::move(filename), Options{}) {}
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int64_t epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;

 private:
  std::string filename_;
  Options options_;
  std::FILE* file_ = nullptr;
  std::vector<std::string> columns_;
};

// Saves the model's weights (safetensors) at the end of an epoch: every epoch, or only when the monitored
// value improved on the best so far (Keras 3: strictly better; the first value always saves; the best carries over
// to a later fit with the same callback, as Keras keeps it).
// `filepath` may hold "{epoch}" / "{epoch:02d}" and "{<log name>:.4f}" placeholders. Its directory is created
// and proven writable when training begins (an IoError then, not after the first epoch). Across workers only
// the chief writes; every worker keeps the same best value (the logs are the job's).
class ModelCheckpoint : public Callback {
 public:
  struct Options {
    std::string monitor = "val_loss";
    bool save_best_only = false;
    Mode mode = Mode::kAuto;
    int verbose = 0;
  };
  ModelCheckpoint(std::string filepath, Options options);
  explicit ModelCheckpoint(std::string filepath) : ModelCheckpoint(std::move(filepath), Options{}) {}
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int64_t epoch, const Logs& logs) override;
  // The best monitored value so far (for tests and logs).
  std::optional<double> best() const { return best_; }

 private:
  std::string filepath_;
  Options options_;
  Mode resolved_mode_ = Mode::kMin;
  std::optional<double> best_;
};

// Stops training when the monitored value has not improved for `patience` epochs, as Keras 3's EarlyStopping:
// an improvement is a value better than the best so far by more than |min_delta|; with a `baseline`, an
// improvement that does not also beat the baseline does not reset the wait, so training stops after `patience`
// epochs that never beat it. With `restore_best_weights`, fit ends with the weights of the best epoch (whether
// or not it stopped early); without an improvement at all, with the first epoch's.
class EarlyStopping : public Callback {
 public:
  struct Options {
    std::string monitor = "val_loss";
    double min_delta = 0;
    int patience = 0;
    Mode mode = Mode::kAuto;
    bool restore_best_weights = false;
    std::optional<double> baseline;
    int verbose = 0;
  };
  explicit EarlyStopping(Options options);
  EarlyStopping() : EarlyStopping(Options{}) {}
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int64_t epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  // The epoch (0-based) at which training was stopped, or -1.
  int64_t stopped_epoch() const { return stopped_epoch_; }
  // The epoch (0-based) with the best monitored value, or -1.
  int64_t best_epoch() const { return best_epoch_; }

 private:
  bool is_improvement(double current, std::optional<double> reference) const;

  Options options_;
  Mode resolved_mode_ = Mode::kMin;
  int wait_ = 0;
  int64_t stopped_epoch_ = -1;
  int64_t best_epoch_ = -1;
  std::optional<double> best_;
  std::vector<Tensor> best_weights_;  // host copies of model.variables(), in order
};

// Lowers the optimizer's learning rate when the monitored value has stopped improving, as Keras 3's
// ReduceLROnPlateau: after `patience` epochs without a value better than the best by more than min_delta, the
// rate becomes max(rate * factor, min_lr) (only while it is above min_lr); then `cooldown` epochs pass before
// epochs count towards the patience again. A lowered rate is a constant one (it replaces a schedule, such as
// lr_scaling's warmup). Every worker decides alike (the logs are the job's), each setting its own optimizer.
class ReduceLROnPlateau : public Callback {
 public:
  struct Options {
    std::string monitor = "val_loss";
    double factor = 0.1;  // in (0, 1)
    int patience = 10;
    Mode mode = Mode::kAuto;
    double min_delta = 1e-4;
    int cooldown = 0;
    double min_lr = 0;
    int verbose = 0;
  };
  explicit ReduceLROnPlateau(Options options);
  ReduceLROnPlateau() : ReduceLROnPlateau(Options{}) {}
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int64_t epoch, const Logs& logs) override;
  // How many times the rate was lowered in the last fit.
  int reductions() const { return reductions_; }

 private:
  Options options_;
  bool up_ = false;  // whether the monitored value improves by going up
  std::optional<double> best_;
  int wait_ = 0;
  int cooldown_counter_ = 0;
  int reductions_ = 0;
};

// Sets the optimizer's learning rate at the start of each epoch: schedule(epoch, current_lr) -> new lr.
class LearningRateScheduler : public Callback {
 public:
  using Schedule = std::function<double(int64_t epoch, double lr)>;
  explicit LearningRateScheduler(Schedule schedule, int verbose = 0);
  void on_epoch_begin(int64_t epoch, const Logs& logs) override;

 private:
  Schedule schedule_;
  int verbose_;
};

// Stops training at the first batch whose loss is NaN or infinite (Keras's TerminateOnNaN) and records
// where, so the caller can tell a run that diverged from one that finished: fit returns normally either
// way. fit does not add it by itself. With `verbose` it also prints
// "Epoch 1, step 3: invalid loss nan, terminating training" on stderr (epoch and step 1-based, as the
// progress bar counts them).
class TerminateOnNaN : public Callback {
 public:
  struct Options {
    bool verbose = true;
  };
  explicit TerminateOnNaN(Options options) : options_(options) {}
  TerminateOnNaN() : TerminateOnNaN(Options{}) {}
  void on_train_begin(const Logs& logs) override;
  void on_epoch_begin(int64_t epoch, const Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;

  // Whether the last fit stopped on a non-finite loss; then where (0-based, as fit passes them to
  // callbacks) and the loss it saw (the epoch's running mean, NaN or +-inf).
  bool fired() const { return fired_; }
  int64_t epoch() const { return epoch_; }
  int64_t batch() const { return batch_; }
  double loss() const { return loss_; }

 private:
  Options options_;
  bool fired_ = false;
  int64_t epoch_ = 0;
  int64_t batch_ = 0;
  double loss_ = 0;
};

// Full training checkpoints (weights, optimizer slots, step, RNG state, and where fit stands: epoch, step
// in the epoch, the input iterator's state and the running metrics) in `directory` (ckpt-<n>/ + a pointer
// file, written atomically; see strata/io/checkpoint.h), like Keras's BackupAndRestore. With `restore`,
// fit first restores the latest checkpoint there and continues exactly where it was saved: on one device
// a run killed and resumed ends with bitwise the weights of the run never killed. A directory with no
// checkpoint says so and starts at the first epoch; a damaged checkpoint is an error naming it (fit never
// starts, so nothing is written over it).
//
// `save_freq` 0 saves at the end of each epoch as ckpt-<epochs done> (a kill loses at most the epoch in
// progress); N > 0 saves every N global steps and at each epoch's end, as ckpt-<global step> (a kill
// loses at most N steps). While the loss is NaN or infinite nothing is saved: diverged weights never
// replace the last good checkpoint. With `delete_checkpoint` (the default, as Keras) the backups are deleted
// when fit completes; keep them (false) to use them as checkpoints. Across workers (MultiWorkerMirroredStrategy)
// every worker takes part in a save (the job's metrics and, when workers read their own files, each worker's
// input position are gathered) and the chief alone writes; every worker restores from the same directory, and the
// workers check that they resume from the same position (an InvalidArgument on every worker otherwise: the
// directory must be on a file system they share).
class BackupAndRestore : public Callback {
 public:
  struct Options {
    bool restore = true;
    int max_to_keep = 3;
    int64_t save_freq = 0;  // 0: every epoch; N > 0: every N steps (and every epoch)
    // Delete the backups when fit completes (Keras's default): they exist to resume an interrupted fit.
    bool delete_checkpoint = true;
  };
  BackupAndRestore(std::string directory, Options options);
  explicit BackupAndRestore(std::string directory) : BackupAndRestore(std::move(directory), Options{}) {}
  void on_train_begin(const Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  void on_epoch_end(int64_t epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  const std::string& directory() const { return directory_; }

 private:
  // Restores the latest checkpoint of the directory, if any, and sets fit's resume position from it.
  void restore_latest(Model& model);
  // Saves as ckpt-<number>, unless the loss in `logs` is not finite.
  void save(int64_t number, const Logs& logs);

  std::string directory_;
  Options options_;
  int64_t last_saved_step_ = -1;
  bool warned_non_finite_ = false;
};

// TensorBoard event files under `log_dir`, as Keras's tf.keras.callbacks.TensorBoard writes them: two runs,
// <log_dir>/train and <log_dir>/validation, each an events.out.tfevents.<unix seconds>.<hostname> file (see
// src/io/event_writer.h) that `tensorboard --logdir <log_dir>` plots. At each epoch's end (step = the 0-based
// epoch): the train run gets epoch_<name> for every log ("epoch_loss", "epoch_accuracy"), epoch_learning_rate
// (the optimizer's current rate), epoch_examples_per_second (the examples the job trained over the epoch's training
// time, validation excluded; across workers every worker's examples) and
// epoch_input_wait_percent (the share of the epoch fit waited for input) and, across workers,
// epoch_communication_seconds (the chief's time running collectives, strata/trace.h); the validation run gets the "val_" logs
// without the prefix ("validation/epoch_loss") and, as Keras writes them at each evaluation's end, the same values
// as evaluation_<name>_vs_iterations at the global step ("validation/evaluation_loss_vs_iterations"); it is made
// only when there are some. With `update_freq` N > 0 the train run also gets batch_<name> (the epoch's running
// values, as fit passes them to callbacks) whenever the global step (optimizer iterations) reaches a multiple of N,
// at that step. Files are flushed at each epoch's end,
// so a running TensorBoard sees every finished epoch and a run cut short between epochs leaves valid files; they
// are closed when fit ends. A fit opens new files. Across workers only the chief writes; the others do nothing.
class TensorBoard : public Callback {
 public:
  struct Options {
    // Keras's update_freq: 0 for "epoch" (epoch scalars only), N > 0 for batch scalars every N steps too.
    int64_t update_freq = 0;
  };
  TensorBoard(std::string log_dir, Options options);
  explicit TensorBoard(std::string log_dir) : TensorBoard(std::move(log_dir), Options{}) {}
  ~TensorBoard() override;
  void on_train_begin(const Logs& logs) override;
  void on_epoch_begin(int64_t epoch, const Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  void on_epoch_end(int64_t epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  // The event files the last fit wrote ("" for a run that had none).
  const std::string& train_file() const { return train_file_; }
  const std::string& validation_file() const { return validation_file_; }

 private:
  struct Writers;
  std::string log_dir_;
  Options options_;
  std::unique_ptr<Writers> writers_;  // null when this process does not write (not the chief) or between fits
  std::string train_file_, validation_file_;
  int64_t last_written_step_ = 0;
  double epoch_start_ = 0, last_batch_end_ = 0;
  double examples_at_epoch_start_ = 0, examples_ = 0;
  double communication_at_epoch_start_ = 0;
};

}  // namespace callbacks
}  // namespace strata
