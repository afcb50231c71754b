// The TensorBoard callback (see strata/train/callbacks.h): epoch and batch scalars into TensorBoard event files.
#include <chrono>
#include <filesystem>

#include "io/event_writer.h"
#include "strata/distribute/strategy.h"
#include "strata/error.h"
#include "strata/optim/optimizer.h"
#include "strata/trace.h"
#include "strata/train/callbacks.h"
#include "strata/train/model.h"

namespace strata::callbacks {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The examples the loss tracker has counted since its last reset (its state is {total, count}, the count in rows).
double examples_counted(const Model& model) {
  const std::vector<std::vector<double>> states = model.tracker_states();
  return !states.empty() && states[0].size() == 2 ? states[0][1] : 0;
}

bool has_val_prefix(const std::string& name) { return name.rfind("val_", 0) == 0; }

}  // namespace

struct TensorBoard::Writers {
  io::detail::EventFileWriter train;
  std::unique_ptr<io::detail::EventFileWriter> validation;  // made at the first validation logs
  explicit Writers(const std::string& dir) : train(dir) {}
};

TensorBoard::TensorBoard(std::string log_dir, Options options) : log_dir_(std::move(log_dir)), options_(options) {
  STRATA_CHECK(options_.update_freq >= 0, InvalidArgument,
               "TensorBoard(" << log_dir_ << "): update_freq must be 0 (\"epoch\") or a number of steps, got "
                              << options_.update_freq);
}

TensorBoard::~TensorBoard() = default;

void TensorBoard::on_train_begin(const Logs&) {
  STRATA_CHECK(model() != nullptr, InvalidArgument, "TensorBoard is not attached to a model (pass it to fit)");
  writers_.reset();
  train_file_.clear();
  validation_file_.clear();
  // Across workers every worker runs the callbacks and only the chief writes (as it alone writes checkpoints).
  const distribute::Strategy* strategy = model()->owning_strategy();
  if (strategy != nullptr && !strategy->is_chief()) return;
  writers_ = std::make_unique<Writers>((std::filesystem::path(log_dir_) / "train").string());
  train_file_ = writers_->train.path();
  last_written_step_ = model()->step();
}

void TensorBoard::on_epoch_begin(int64_t, const Logs&) {
  if (!writers_) return;
  epoch_start_ = last_batch_end_ = now_seconds();
  // A fit resumed mid-epoch starts the epoch with the restored count: only the rows trained from here are timed.
  examples_at_epoch_start_ = examples_ = examples_counted(*model());
  communication_at_epoch_start_ = trace::communication_seconds();
}

void TensorBoard::on_train_batch_end(int64_t, const Logs& logs) {
  if (!writers_) return;
  last_batch_end_ = now_seconds();
  examples_ = examples_counted(*model());
  if (options_.update_freq == 0) return;
  // Steps may run in groups (steps_per_execution): write when the group crossed a multiple of update_freq.
  const int64_t step = model()->step();
  if (step / options_.update_freq <= last_written_step_ / options_.update_freq) return;
  last_written_step_ = step;
  std::vector<std::pair<std::string, float>> scalars;
  for (const auto& [name, value] : logs.items()) scalars.emplace_back("batch_" + name, static_cast<float>(value));
  writers_->train.add_scalars(step, scalars);
}

void TensorBoard::on_epoch_end(int64_t epoch, const Logs& logs) {
  if (!writers_) return;
  Model& m = *model();
  std::vector<std::pair<std::string, float>> train, validation;
  for (const auto& [name, value] : logs.items()) {
    if (has_val_prefix(name)) {
      validation.emplace_back("epoch_" + name.substr(4), static_cast<float>(value));
    } else {
      train.emplace_back("epoch_" + name, static_cast<float>(value));
    }
  }
  if (m.compiled()) train.emplace_back("epoch_learning_rate", m.optimizer().learning_rate());
  // Across workers the chief's loss tracker counts its own rows, so the job's count (every worker's, summed by fit
  // at the epoch's end) is taken instead; the count at the epoch's start is the chief's, which is the job's after
  // a resume (the chief restores the job's sums, the others zeros) and 0 otherwise.
  const distribute::Strategy* strategy = m.owning_strategy();
  const double trained =
      strategy != nullptr && strategy->num_workers() > 1 ? static_cast<double>(m.epoch_examples()) : examples_;
  const double examples = trained - examples_at_epoch_start_, seconds = last_batch_end_ - epoch_start_;
  if (examples > 0 && seconds > 0) {
    train.emplace_back("epoch_examples_per_second", static_cast<float>(examples / seconds));
  }
  train.emplace_back("epoch_input_wait_percent", static_cast<float>(100.0 * m.input_wait_fraction()));
  // The chief's own time in collectives across workers (overlapped with compute or not); none on one worker.
  if (strategy != nullptr && strategy->num_workers() > 1) {
    train.emplace_back("epoch_communication_seconds",
                       static_cast<float>(trace::communication_seconds() - communication_at_epoch_start_));
  }
  writers_->train.add_scalars(epoch, train);
  writers_->train.flush();
  if (!validation.empty()) {
    if (!writers_->validation) {
      writers_->validation =
          std::make_unique<io::detail::EventFileWriter>((std::filesystem::path(log_dir_) / "validation").string());
      validation_file_ = writers_->validation->path();
    }
    // Keras writes each evaluation's logs at its end a second time, against the global step, before the epoch's.
    std::vector<std::pair<std::string, float>> against_steps;
    for (const auto& [tag, value] : validation) {
      against_steps.emplace_back("evaluation_" + tag.substr(6) + "_vs_iterations", value);  // tag: "epoch_<name>"
    }
    writers_->validation->add_scalars(m.step(), against_steps);
    writers_->validation->add_scalars(epoch, validation);
    writers_->validation->flush();
  }
}

void TensorBoard::on_train_end(const Logs&) {
  if (!writers_) return;
  std::unique_ptr<Writers> writers = std::move(writers_);
  writers->train.close();
  if (writers->validation) writers->validation->close();
}

}  // namespace strata::callbacks
