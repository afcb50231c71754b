// Metrics, like keras.metrics: running statistics updated every batch from plain Tensors (no gradient).
//
//   auto acc = metrics::get("accuracy", "sparse_categorical_crossentropy");  // SparseCategoricalAccuracy
//   acc->update_state(labels, logits);
//   double a = acc->result();
//
// y_pred is float32, [batch, classes] or [batch]; y_true int32/int64/uint8 or float32. sample_weight is
// optional with one weight per example (per row of y_pred). A metric's state is a few doubles (e.g.
// {total, count}); replicas merge by summing states (merge_state), which is exact for every metric
// here. Updates are plain loops over the elements with no allocation. With predictions on a GPU the accuracies and
// mean_squared_error score the rows there and read back two numbers; precision, recall and mean copy to the host.
//
// Thread-safety: a metric is not synchronised; give each replica its own (clone) and merge.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "strata/tensor.h"

namespace strata::metrics {

class Metric {
 public:
  virtual ~Metric();
  virtual void reset_state() = 0;
  virtual void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight = {}) = 0;
  virtual double result() const = 0;
  // The state as plain numbers; merging replicas sums them.
  virtual std::vector<double> state() const = 0;
  virtual void set_state(const std::vector<double>& state) = 0;
  // state += other.state(); throws InvalidArgument if the states differ in size.
  void merge_state(const Metric& other);
  const std::string& name() const { return name_; }
  // The same configuration, with a reset state.
  virtual std::shared_ptr<Metric> clone() const = 0;
  // Whether a better model has a higher (kUp) or lower (kDown) value, Keras's `_direction`; kNone when the metric
  // does not say (a plain Mean). Callbacks in mode "auto" read it.
  enum class Direction { kNone, kUp, kDown };
  virtual Direction direction() const { return Direction::kNone; }

 protected:
  explicit Metric(std::string name) : name_(std::move(name)) {}

 private:
  std::string name_;
};

// A weighted mean: state {total, count}, result total / count (0 when count is 0).
class Mean : public Metric {
 public:
  explicit Mean(std::string name = "mean");
  void update(double value, double weight = 1.0);
  // Averages the elements of `y_true` (the values; y_pred is ignored and may be undefined), each
  // weighted by its row's sample weight.
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight = {}) override;
  void reset_state() override { total_ = count_ = 0; }
  double result() const override { return count_ == 0 ? 0.0 : total_ / count_; }
  std::vector<double> state() const override { return {total_, count_}; }
  void set_state(const std::vector<double>& state) override;
  std::shared_ptr<Metric> clone() const override { return std::make_shared<Mean>(name()); }

 protected:
  double total_ = 0, count_ = 0;
};

// Mean of a per-example value computed from (y_true, y_pred) (Keras's MeanMetricWrapper).
class MeanMetricWrapper : public Mean {
 public:
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight = {}) override;

 protected:
  using Mean::Mean;
  // Adds, per example (row) r, score_r into scores[r] (scores has `rows` zeros), where the example's
  // value is its mean score over the last axis. rows and the row width are y_pred's.
  virtual void score(const Tensor& y_true, const Tensor& y_pred, int64_t rows, int64_t width, double* scores) const = 0;
  // Elements of y_pred averaged per example (1 when an example is one element).
  static int64_t row_width(const Tensor& y_pred);
  // The score as the GPU computes it (optim/cuda/metrics.cu): kNone when it cannot, and predictions on a GPU are
  // then copied to the host; else their rows are scored there and two sums come back.
  struct DeviceScore {
    enum Kind {
      kNone = -1,
      kAccuracy,
      kSparseCategoricalAccuracy,
      kCategoricalAccuracy,
      kBinaryAccuracy,
      kSquaredError,
    };
    Kind kind = kNone;
    float threshold = 0;  // kBinaryAccuracy's
  };
  virtual DeviceScore device_score() const { return {}; }

 private:
  // update_state with y_pred on a GPU and a device_score: y_true and the weights follow it there.
  void update_on_device(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight);
  std::vector<double> scratch_;  // reused between updates
};

// Fraction of elements where y_pred equals y_true exactly (keras.metrics.Accuracy).
class Accuracy final : public MeanMetricWrapper {
 public:
  explicit Accuracy(std::string name = "accuracy") : MeanMetricWrapper(std::move(name)) {}
  std::shared_ptr<Metric> clone() const override { return std::make_shared<Accuracy>(name()); }
  Direction direction() const override { return Direction::kUp; }

 protected:
  DeviceScore device_score() const override { return {DeviceScore::kAccuracy}; }
  void score(const Tensor& y_true, const Tensor& y_pred, int64_t rows, int64_t width, double* scores) const override;
};

// argmax(y_pred) == label, labels shaped [batch] or [batch, 1]; ties pick the first maximum.
class SparseCategoricalAccuracy final : public MeanMetricWrapper {
 public:
  explicit SparseCategoricalAccuracy(std::string name = "sparse_categorical_accuracy")
      : MeanMetricWrapper(std::move(name)) {}
  std::shared_ptr<Metric> clone() const override { return std::make_shared<SparseCategoricalAccuracy>(name()); }
  Direction direction() const override { return Direction::kUp; }

 protected:
  DeviceScore device_score() const override { return {DeviceScore::kSparseCategoricalAccuracy}; }
  void score(const Tensor& y_true, const Tensor& y_pred, int64_t rows, int64_t width, double* scores) const override;
};

// argmax(y_pred) == argmax(y_true), y_true one-hot shaped like y_pred.
class CategoricalAccuracy final : public MeanMetricWrapper {
 public:
  explicit CategoricalAccuracy(std::string name = "categorical_accuracy") : MeanMetricWrapper(std::move(name)) {}
  std::shared_ptr<Metric> clone() const override { return std::make_shared<CategoricalAccuracy>(name()); }
  Direction direction() const override { return Direction::kUp; }

 protected:
  DeviceScore device_score() const override { return {DeviceScore::kCategoricalAccuracy}; }
  void score(const Tensor& y_true, const Tensor& y_pred, int64_t rows, int64_t width, double* scores) const override;
};

// y_true == (y_pred > threshold ? 1 : 0), averaged over the last axis (Keras compares exactly).
class BinaryAccuracy final : public MeanMetricWrapper {
 public:
  explicit BinaryAccuracy(std::string name = "binary_accuracy", float threshold = 0.5f)
      : MeanMetricWrapper(std::move(name)), threshold_(threshold) {}
  std::shared_ptr<Metric> clone() const override { return std::make_shared<BinaryAccuracy>(name(), threshold_); }
  Direction direction() const override { return Direction::kUp; }

 protected:
  DeviceScore device_score() const override { return {DeviceScore::kBinaryAccuracy, threshold_}; }
  void score(const Tensor& y_true, const Tensor& y_pred, int64_t rows, int64_t width, double* scores) const override;

 private:
  float threshold_;
};

// Mean over the last axis of (y_true - y_pred)², averaged over examples.
class MeanSquaredError final : public MeanMetricWrapper {
 public:
  explicit MeanSquaredError(std::string name = "mean_squared_error") : MeanMetricWrapper(std::move(name)) {}
  std::shared_ptr<Metric> clone() const override { return std::make_shared<MeanSquaredError>(name()); }
  Direction direction() const override { return Direction::kDown; }

 protected:
  DeviceScore device_score() const override { return {DeviceScore::kSquaredError}; }
  void score(const Tensor& y_true, const Tensor& y_pred, int64_t rows, int64_t width, double* scores) const override;
};

// Precision and recall at a threshold, over every element: positive means y_pred > threshold (and,
// for the truth, y_true != 0, Keras's cast to bool). State {true_positives, false_positives} / {true_positives,
// false_negatives}; result 0 when nothing counted.
class Precision final : public Metric {
 public:
  explicit Precision(std::string name = "precision", float threshold = 0.5f)
      : Metric(std::move(name)), threshold_(threshold) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight = {}) override;
  void reset_state() override { tp_ = fp_ = 0; }
  double result() const override { return tp_ + fp_ == 0 ? 0.0 : tp_ / (tp_ + fp_); }
  std::vector<double> state() const override { return {tp_, fp_}; }
  void set_state(const std::vector<double>& state) override;
  std::shared_ptr<Metric> clone() const override { return std::make_shared<Precision>(name(), threshold_); }
  Direction direction() const override { return Direction::kUp; }

 private:
  float threshold_;
  double tp_ = 0, fp_ = 0;
};

class Recall final : public Metric {
 public:
  explicit Recall(std::string name = "recall", float threshold = 0.5f)
      : Metric(std::move(name)), threshold_(threshold) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight = {}) override;
  void reset_state() override { tp_ = fn_ = 0; }
  double result() const override { return tp_ + fn_ == 0 ? 0.0 : tp_ / (tp_ + fn_); }
  std::vector<double> state() const override { return {tp_, fn_}; }
  void set_state(const std::vector<double>& state) override;
  std::shared_ptr<Metric> clone() const override { return std::make_shared<Recall>(name(), threshold_); }
  Direction direction() const override { return Direction::kUp; }

 private:
  float threshold_;
  double tp_ = 0, fn_ = 0;
};

// A metric by Keras name, as compile() resolves it: "accuracy"/"acc" become
// sparse_categorical_accuracy, categorical_accuracy or binary_accuracy when `loss_name` is the
// matching crossentropy (any name losses::get accepts), else Accuracy; the metric keeps the name it
// was asked for ("accuracy"), as Keras logs it. Also "sparse_categorical_accuracy",
// "categorical_accuracy", "binary_accuracy", "mse"/"mean_squared_error", "precision", "recall", "mean".
// Unknown names throw InvalidArgument listing the known ones.
std::shared_ptr<Metric> get(const std::string& name, const std::string& loss_name = "");

}  // namespace strata::metrics
