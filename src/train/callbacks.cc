// Logs and the Keras callbacks other than the progress bar (see strata/train/callbacks.h).
#include "strata/train/callbacks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <sstream>

#include "strata/distribute/strategy.h"
#include "strata/error.h"
#include "strata/io/checkpoint.h"
#include "strata/train/model.h"
#include "io/output_paths.h"
#include "train/worker_state.h"

namespace strata {

void Logs::set(const std::string& name, double value) {
  for (auto& [k, v] : items_) {
    if (k == name) {
      v = value;
      return;
    }
  }
  items_.emplace_back(name, value);
}

std::optional<double> Logs::get(const std::string& name) const {
  for (const auto& [k, v] : items_) {
    if (k == name) return v;
  }
  return std::nullopt;
}

double Logs::at(const std::string& name) const {
  if (auto v = get(name)) return *v;
  std::ostringstream names;
  for (const auto& [k, v] : items_) names << " " << k;
  STRATA_THROW(InvalidArgument, "no log named '" << name << "'; the logs have:" << names.str());
}

namespace callbacks {

Mode parse_mode(const std::string& text, const std::string& what) {
  if (text == "auto") return Mode::kAuto;
  if (text == "min") return Mode::kMin;
  if (text == "max") return Mode::kMax;
  STRATA_THROW(InvalidArgument, what << ": mode must be auto, min or max, got '" << text << "'");
}

Mode resolve_mode(Mode mode, const std::string& monitor, const Model& model, const char* callback) {
  if (mode != Mode::kAuto) return mode;
  const std::string name = monitor.rfind("val_", 0) == 0 ? monitor.substr(4) : monitor;
  if (name == "loss") return Mode::kMin;
  if (model.compiled()) {
    for (const auto& metric : model.metrics()) {
      if (metric->name() != name) continue;
      if (metric->direction() == metrics::Metric::Direction::kUp) return Mode::kMax;
      if (metric->direction() == metrics::Metric::Direction::kDown) return Mode::kMin;
    }
  }
  STRATA_THROW(InvalidArgument, callback << ": monitor '" << monitor
                                         << "' with mode auto: cannot tell whether it should go up or down (it is "
                                            "neither the loss nor a compiled metric with a direction); give mode "
                                            "min or max");
}

namespace {
Model& require_model(const Callback& cb, const char* what) {
  STRATA_CHECK(cb.model() != nullptr, InvalidArgument, what << " is not attached to a model (pass it to fit)");
  return *cb.model();
}

// Across workers only the chief writes files and prints; with no strategy or one worker, this process.
bool is_chief(const Model& model) {
  const distribute::Strategy* strategy = model.owning_strategy();
  return strategy == nullptr || strategy->is_chief();
}
}  // namespace

// ---- CSVLogger

CSVLogger::CSVLogger(std::string filename, Options options) : filename_(std::move(filename)), options_(options) {}

void CSVLogger::on_train_begin(const Logs&) {
  bool had_rows = false;
  if (options_.append) {
    if (std::FILE* existing = std::fopen(filename_.c_str(), "r")) {
      had_rows = std::fgetc(existing) != EOF;
      std::fclose(existing);
    }
  }
  file_ = std::fopen(filename_.c_str(), options_.append ? "a" : "w");
  STRATA_CHECK(file_ != nullptr, IoError, "CSVLogger cannot open '" << filename_ << "' for writing");
  columns_.clear();
  if (had_rows) columns_.push_back("");  // the header exists already; keep the file's columns
}

void CSVLogger::on_epoch_end(int64_t epoch, const Logs& logs) {
  if (file_ == nullptr) return;
  const std::string& sep = options_.separator;
  if (columns_.empty()) {
    std::fprintf(file_, "epoch");
    for (const auto& [k, v] : logs.items()) {
      std::fprintf(file_, "%s%s", sep.c_str(), k.c_str());
      columns_.push_back(k);
    }
    std::fprintf(file_, "\n");
  }
  std::fprintf(file_, "%lld", static_cast<long long>(epoch));
  for (const auto& [k, v] : logs.items()) std::fprintf(file_, "%s%.9g", sep.c_str(), v);
  std::fprintf(file_, "\n");
  std::fflush(file_);
}

void CSVLogger::on_train_end(const Logs&) {
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

// ---- ModelCheckpoint

namespace {
// Fills "{epoch}", "{epoch:02d}" and "{name:.4f}"-style placeholders from the epoch (1-based, as Keras) and logs.
std::string format_path(const std::string& pattern, int64_t epoch, const Logs& logs) {
  static const std::regex placeholder(R"(\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\})");
  std::string out;
  auto begin = std::sregex_iterator(pattern.begin(), pattern.end(), placeholder);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    out += pattern.substr(last, m.position() - last);
    const std::string key = m[1];
    const std::string spec = m[2].matched ? m[2].str() : "";
    char buf[64];
    if (key == "epoch") {
      STRATA_CHECK(spec.empty() || spec.back() == 'd', InvalidArgument,
                   "checkpoint path '" << pattern << "': {epoch} takes an integer format like :02d");
      const std::string flags = spec.empty() ? "" : spec.substr(0, spec.size() - 1);
      std::snprintf(buf, sizeof buf, ("%" + flags + "lld").c_str(), static_cast<long long>(epoch + 1));
    } else {
      const double v = logs.at(key);
      const std::string fmt = "%" + (spec.empty() ? std::string("g") : spec);
      STRATA_CHECK(fmt.back() == 'f' || fmt.back() == 'g' || fmt.back() == 'e', InvalidArgument,
                   "checkpoint path '" << pattern << "': {" << key << "} takes a float format like :.4f");
      std::snprintf(buf, sizeof buf, fmt.c_str(), v);
    }
    out += buf;
    last = m.position() + m.length();
  }
  return out + pattern.substr(last);
}
}  // namespace

ModelCheckpoint::ModelCheckpoint(std::string filepath, Options options)
    : filepath_(std::move(filepath)), options_(std::move(options)) {}

void ModelCheckpoint::on_train_begin(const Logs&) {
  const Model& model = require_model(*this, "ModelCheckpoint");
  if (options_.save_best_only) resolved_mode_ = resolve_mode(options_.mode, options_.monitor, model, "ModelCheckpoint");
  if (!is_chief(model)) return;
  // Keras creates the directory when it saves; it is made (and proven writable) now, before the first step.
  const std::filesystem::path directory = std::filesystem::path(filepath_).parent_path();
  io::check_output_directory(directory.empty() ? "." : directory.string(),
                                   "ModelCheckpoint('" + filepath_ + "')");
}

void ModelCheckpoint::on_epoch_end(int64_t epoch, const Logs& logs) {
  Model& model = require_model(*this, "ModelCheckpoint");
  if (options_.save_best_only) {
    const std::optional<double> current = logs.get(options_.monitor);
    if (!current) {
      if (is_chief(model)) {
        std::fprintf(stderr, "ModelCheckpoint: '%s' is not in the logs; saving skipped\n", options_.monitor.c_str());
      }
      return;
    }
    const bool better = !best_ || (resolved_mode_ == Mode::kMax ? *current > *best_ : *current < *best_);
    if (!better) return;
    best_ = *current;
  }
  if (!is_chief(model)) return;  // every worker holds the same weights; the chief writes them
  const std::string path = format_path(filepath_, epoch, logs);
  model.save_weights(path);
  if (options_.verbose > 0) std::printf("Epoch %lld: saved weights to %s\n", static_cast<long long>(epoch + 1), path.c_str());
}

// ---- EarlyStopping

EarlyStopping::EarlyStopping(Options options) : options_(std::move(options)) {
  STRATA_CHECK(options_.patience >= 0, InvalidArgument, "EarlyStopping: patience must be >= 0, got " << options_.patience);
}

bool EarlyStopping::is_improvement(double current, std::optional<double> reference) const {
  if (!reference) return true;
  const double delta = std::fabs(options_.min_delta);
  return resolved_mode_ == Mode::kMax ? current - delta > *reference : current + delta < *reference;
}

void EarlyStopping::on_train_begin(const Logs&) {
  const Model& model = require_model(*this, "EarlyStopping");
  resolved_mode_ = resolve_mode(options_.mode, options_.monitor, model, "EarlyStopping");
  wait_ = 0;
  stopped_epoch_ = -1;
  best_epoch_ = -1;
  best_.reset();
  best_weights_.clear();
}

namespace {
std::vector<Tensor> host_copies(const Model& model) {
  std::vector<Tensor> copies;
  for (const Variable& v : model.variables()) {
    const Tensor& t = v.value();
    copies.push_back(t.device().is_cpu() ? t.clone() : t.to(Device::cpu()));
  }
  return copies;
}
}  // namespace

void EarlyStopping::on_epoch_end(int64_t epoch, const Logs& logs) {
  Model& model = require_model(*this, "EarlyStopping");
  const std::optional<double> current = logs.get(options_.monitor);
  if (!current) {
    if (is_chief(model)) std::fprintf(stderr, "EarlyStopping: '%s' is not in the logs\n", options_.monitor.c_str());
    return;
  }
  if (options_.restore_best_weights && best_weights_.empty()) {  // until one improves, the first epoch's are best
    best_weights_ = host_copies(model);
    best_epoch_ = epoch;
  }
  ++wait_;
  if (is_improvement(*current, best_)) {
    best_ = *current;
    best_epoch_ = epoch;
    if (options_.restore_best_weights) best_weights_ = host_copies(model);
    // The wait restarts only when the value beats the baseline too.
    if (!options_.baseline || is_improvement(*current, options_.baseline)) wait_ = 0;
    return;
  }
  if (wait_ >= options_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    model.stop_training = true;
  }
}

void EarlyStopping::on_train_end(const Logs&) {
  Model& model = require_model(*this, "EarlyStopping");
  if (stopped_epoch_ >= 0 && options_.verbose > 0 && is_chief(model)) {
    std::printf("Epoch %lld: early stopping\n", static_cast<long long>(stopped_epoch_ + 1));
  }
  if (!options_.restore_best_weights || best_weights_.empty()) return;
  if (options_.verbose > 0 && is_chief(model)) {
    std::printf("Restoring model weights from the end of the best epoch: %lld\n",
                static_cast<long long>(best_epoch_ + 1));
  }
  const std::vector<Variable> vars = model.variables();
  STRATA_CHECK(vars.size() == best_weights_.size(), InvalidArgument,
               "EarlyStopping: the model has " << vars.size() << " variables, the best epoch had "
                                               << best_weights_.size());
  for (size_t i = 0; i < vars.size(); ++i) {
    Variable v = vars[i];
    v.assign(best_weights_[i]);
  }
  std::fflush(stdout);
}

// ---- ReduceLROnPlateau

ReduceLROnPlateau::ReduceLROnPlateau(Options options) : options_(std::move(options)) {
  STRATA_CHECK(options_.factor > 0 && options_.factor < 1, InvalidArgument,
               "ReduceLROnPlateau: factor must be in (0, 1) (it multiplies the rate), got " << options_.factor);
  STRATA_CHECK(options_.patience >= 0 && options_.cooldown >= 0 && options_.min_lr >= 0, InvalidArgument,
               "ReduceLROnPlateau: patience, cooldown and min_lr must be >= 0");
}

void ReduceLROnPlateau::on_train_begin(const Logs&) {
  require_model(*this, "ReduceLROnPlateau");
  // Keras's own rule (not MonitorCallback's): max when the name holds "acc".
  up_ = options_.mode == Mode::kMax ||
        (options_.mode == Mode::kAuto && options_.monitor.find("acc") != std::string::npos);
  best_.reset();
  wait_ = 0;
  cooldown_counter_ = 0;
  reductions_ = 0;
}

void ReduceLROnPlateau::on_epoch_end(int64_t epoch, const Logs& logs) {
  Model& model = require_model(*this, "ReduceLROnPlateau");
  const std::optional<double> current = logs.get(options_.monitor);
  if (!current) {
    if (is_chief(model)) std::fprintf(stderr, "ReduceLROnPlateau: '%s' is not in the logs\n", options_.monitor.c_str());
    return;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    wait_ = 0;
  }
  const double delta = options_.min_delta;
  const bool better = !best_ || (up_ ? *current > *best_ + delta : *current < *best_ - delta);
  if (better) {
    best_ = *current;
    wait_ = 0;
    return;
  }
  if (cooldown_counter_ > 0 || ++wait_ < options_.patience) return;
  optim::Optimizer& optimizer = model.optimizer();
  const double old_lr = optimizer.learning_rate();
  if (old_lr > static_cast<float>(options_.min_lr)) {
    const double new_lr = std::max(old_lr * options_.factor, options_.min_lr);
    optimizer.set_learning_rate(static_cast<float>(new_lr));
    ++reductions_;
    if (options_.verbose > 0 && is_chief(model)) {
      std::printf("Epoch %lld: ReduceLROnPlateau reducing learning rate to %g.\n",
                  static_cast<long long>(epoch + 1), new_lr);
      std::fflush(stdout);
    }
    cooldown_counter_ = options_.cooldown;
    wait_ = 0;
  }
}

// ---- LearningRateScheduler

LearningRateScheduler::LearningRateScheduler(Schedule schedule, int verbose)
    : schedule_(std::move(schedule)), verbose_(verbose) {}

void LearningRateScheduler::on_epoch_begin(int64_t epoch, const Logs&) {
  Model& model = require_model(*this, "LearningRateScheduler");
  const double lr = schedule_(epoch, model.optimizer().learning_rate());
  STRATA_CHECK(std::isfinite(lr), InvalidArgument, "LearningRateScheduler returned " << lr << " for epoch " << epoch);
  model.optimizer().set_learning_rate(static_cast<float>(lr));
  if (verbose_ > 0) std::printf("Epoch %lld: learning rate %g\n", static_cast<long long>(epoch + 1), lr);
}

// ---- TerminateOnNaN

void TerminateOnNaN::on_train_begin(const Logs&) {
  fired_ = false;
  epoch_ = batch_ = 0;
  loss_ = 0;
}

void TerminateOnNaN::on_epoch_begin(int64_t epoch, const Logs&) { epoch_ = epoch; }

void TerminateOnNaN::on_train_batch_end(int64_t batch, const Logs& logs) {
  const std::optional<double> loss = logs.get("loss");
  if (fired_ || !loss || std::isfinite(*loss)) return;
  fired_ = true;
  batch_ = batch;
  loss_ = *loss;
  if (options_.verbose) {
    std::fprintf(stderr, "Epoch %lld, step %lld: invalid loss %g, terminating training\n",
                 static_cast<long long>(epoch_ + 1), static_cast<long long>(batch + 1), *loss);
  }
  require_model(*this, "TerminateOnNaN").stop_training = true;
}

// ---- BackupAndRestore

BackupAndRestore::BackupAndRestore(std::string directory, Options options)
    : directory_(std::move(directory)), options_(options) {
  STRATA_CHECK(options_.save_freq >= 0, InvalidArgument,
               "BackupAndRestore(" << directory_ << "): save_freq must be 0 (every epoch) or a number of steps, got "
                                   << options_.save_freq);
}

namespace {
// Across workers, every worker must resume from the same position (the chief alone writes the checkpoints, so a
// worker that cannot read them would start over while the others resume, and their collectives would pair up
// wrongly). All of them compare (step, epochs done, step in epoch): every value is equal on every worker iff
// (sum x)^2 == workers * sum x^2; otherwise every worker stops with the same error.
void check_same_position_on_every_worker(const Model& model, const std::string& directory) {
  const distribute::Strategy* strategy = model.owning_strategy();
  if (strategy == nullptr || strategy->num_workers() == 1) return;
  const FitPosition& p = model.restored_position();
  const std::vector<double> mine = {static_cast<double>(model.step()), static_cast<double>(p.epochs_done),
                                    static_cast<double>(p.step_in_epoch)};
  std::vector<double> values = mine;
  for (double v : mine) values.push_back(v * v);
  const std::vector<double> sums = strategy->sum_across_workers(values);
  const double n = strategy->num_workers();
  for (size_t i = 0; i < mine.size(); ++i) {
    STRATA_CHECK(sums[i] * sums[i] == n * sums[mine.size() + i], InvalidArgument,
                 "BackupAndRestore(" << directory << "): the workers would resume from different positions (worker "
                                     << strategy->worker_index() << ": step " << model.step() << ", the workers' mean "
                                     << sums[0] / n << "); every worker must read the chief's checkpoints in the "
                                                       "same directory (a file system they share)");
  }
}

}  // namespace

void BackupAndRestore::on_train_begin(const Logs&) {
  Model& model = require_model(*this, "BackupAndRestore");
  last_saved_step_ = model.step();
  warned_non_finite_ = false;
  if (!options_.restore) return;
  restore_latest(model);
  check_same_position_on_every_worker(model, directory_);
  if (model.step() > 0) detail::broadcast_state_from_chief(model);  // every worker restored: each takes the chief's copy
}

void BackupAndRestore::restore_latest(Model& model) {
  // A damaged checkpoint (or pointer file) throws here, naming it: fit does not start and writes nothing.
  const std::optional<std::string> latest = io::CheckpointManager(directory_).latest();
  if (!latest) {
    std::printf("No checkpoint to resume from in %s: starting at epoch 1\n", directory_.c_str());
    std::fflush(stdout);
    return;
  }
  STRATA_CHECK(model.built(), InvalidArgument,
               "BackupAndRestore: model '" << model.name() << "' must be built (build_for) before restoring " << *latest);
  model.restore_checkpoint(*latest);
  const FitPosition& position = model.restored_position();
  model.set_resume_position(position);
  last_saved_step_ = model.step();
  if (position.step_in_epoch > 0 && !position.input_finished) {
    std::printf("Restored %s: epoch %lld at step %lld of it (global step %lld)\n", latest->c_str(),
                static_cast<long long>(position.epochs_done + 1), static_cast<long long>(position.step_in_epoch),
                static_cast<long long>(model.step()));
  } else {
    std::printf("Restored %s: %lld epoch(s) done, step %lld\n", latest->c_str(),
                static_cast<long long>(position.epochs_done), static_cast<long long>(model.step()));
  }
  std::fflush(stdout);
}

void BackupAndRestore::save(int64_t number, const Logs& logs) {
  Model& model = require_model(*this, "BackupAndRestore");
  // Diverged weights never replace the last good checkpoint: resuming from them would go on diverging.
  if (const std::optional<double> loss = logs.get("loss"); loss && !std::isfinite(*loss)) {
    if (!warned_non_finite_) {
      std::fflush(stdout);
      std::fprintf(stderr, "BackupAndRestore: the loss is %g; no checkpoint is saved while it is not finite\n", *loss);
      warned_non_finite_ = true;
    }
    return;
  }
  // Across workers every worker takes part (save_checkpoint gathers the job's position) and the chief alone writes
  // (every worker holds the same weights); the others read it on resume.
  model.save_checkpoint(directory_, number, options_.max_to_keep);
  last_saved_step_ = model.step();
}

void BackupAndRestore::on_train_batch_end(int64_t, const Logs& logs) {
  if (options_.save_freq == 0) return;
  const int64_t step = require_model(*this, "BackupAndRestore").step();
  // Steps run in groups (steps_per_execution): save when the group crossed a multiple of save_freq.
  if (step / options_.save_freq > last_saved_step_ / options_.save_freq) save(step, logs);
}

void BackupAndRestore::on_epoch_end(int64_t epoch, const Logs& logs) {
  save(options_.save_freq == 0 ? epoch + 1 : require_model(*this, "BackupAndRestore").step(), logs);
}

void BackupAndRestore::on_train_end(const Logs&) {
  if (!options_.delete_checkpoint) return;
  // fit completed: nothing to resume. Across workers the chief, which wrote them, deletes them.
  const distribute::Strategy* strategy = require_model(*this, "BackupAndRestore").owning_strategy();
  if (strategy != nullptr && !strategy->is_chief()) return;
  io::CheckpointManager(directory_).remove_all();
}

}  // namespace callbacks
}  // namespace strata
