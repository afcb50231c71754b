// Metric state updates: one loop per batch over the elements, reading y_true in its own dtype. With predictions on a
// GPU, the accuracies and mean_squared_error score each row there (optim/cuda/metrics.cu) and only the batch's two
// sums come back (one wait for the device); precision, recall and mean copy their tensors to the host first.
// Thread-safety: see strata/optim/metrics.h (not synchronised).
#include "strata/optim/metrics.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>

#include "optim/cuda/optim_kernels.h"
#include "strata/optim/losses.h"

namespace strata::metrics {

namespace {

// Calls f(const T* data) with t's elements in their own type.
template <class F>
void with_values(const char* who, const Tensor& t, const char* what, F&& f) {
  STRATA_CHECK(t.defined(), InvalidArgument, who << ": " << what << " is undefined");
  STRATA_CHECK(t.device().is_cpu(), Unavailable, who << ": " << what << " on " << t.device().str());
  switch (t.dtype()) {
    case DType::kFloat32:
      f(t.data<float>());
      return;
    case DType::kInt32:
      f(t.data<int32_t>());
      return;
    case DType::kInt64:
      f(t.data<int64_t>());
      return;
    case DType::kUInt8:
      f(t.data<uint8_t>());
      return;
    default:
      break;
  }
  STRATA_THROW(InvalidArgument, who << ": " << what << " has unsupported dtype " << dtype_name(t.dtype()));
}

// Whether any of the defined tensors lives off the host.
bool any_off_host(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && !t->device().is_cpu()) return true;
  return false;
}
// `t` on the host (itself when it is there, or undefined).
Tensor on_host(const Tensor& t) { return !t.defined() || t.device().is_cpu() ? t : t.to(Device::cpu()); }

// Rows of a tensor as metrics see them: rank >= 2 is [rows, width]; rank 1 is one element per row.
int64_t rows_of(const Tensor& t) {
  if (t.rank() == 0) return 1;
  return t.rank() == 1 ? t.numel() : t.numel() / t.dim(-1);
}

// The sample weights as one float per row (nullptr: all ones).
const float* row_weights(const char* who, const Tensor& sample_weight, int64_t rows, Tensor& holder) {
  if (!sample_weight.defined()) return nullptr;
  holder = sample_weight.dtype() == DType::kFloat32 ? sample_weight : sample_weight.to(DType::kFloat32);
  STRATA_CHECK(holder.device().is_cpu(), Unavailable, who << ": sample_weight on " << holder.device().str());
  STRATA_CHECK(holder.numel() == rows, ShapeError,
               who << ": sample_weight " << holder.shape_str() << " needs one weight per example (" << rows << ")");
  return holder.data<float>();
}

void check_numel(const char* who, const Tensor& y_true, int64_t expected, const Tensor& y_pred) {
  STRATA_CHECK(y_true.numel() == expected, ShapeError,
               who << ": y_true " << y_true.shape_str() << " does not fit y_pred " << y_pred.shape_str());
}

template <class T>
int64_t argmax_row(const T* x, int64_t width) {
  int64_t best = 0;
  for (int64_t k = 1; k < width; ++k) {
    if (x[k] > x[best]) best = k;
  }
  return best;
}

void set_pair(const char* who, const std::vector<double>& state, double& a, double& b) {
  STRATA_CHECK(state.size() == 2, InvalidArgument, who << ".set_state: expected 2 numbers, got " << state.size());
  a = state[0];
  b = state[1];
}

}  // namespace

Metric::~Metric() = default;

void Metric::merge_state(const Metric& other) {
  std::vector<double> mine = state();
  const std::vector<double> theirs = other.state();
  STRATA_CHECK(mine.size() == theirs.size(), InvalidArgument,
               "metric '" << name() << "': cannot merge the state of '" << other.name() << "' (" << theirs.size()
                          << " numbers, expected " << mine.size() << ")");
  for (size_t i = 0; i < mine.size(); ++i) mine[i] += theirs[i];
  set_state(mine);
}

// ---- Mean

Mean::Mean(std::string name) : Metric(std::move(name)) {}

void Mean::update(double value, double weight) {
  total_ += value * weight;
  count_ += weight;
}

void Mean::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  if (any_off_host({&y_true, &sample_weight})) {
    update_state(on_host(y_true), y_pred, on_host(sample_weight));
    return;
  }
  const int64_t n = y_true.numel();
  const int64_t rows = y_true.rank() == 0 ? 1 : y_true.dim(0);
  const int64_t width = rows == 0 ? 0 : n / rows;
  Tensor holder;
  const float* w = row_weights(name().c_str(), sample_weight, rows, holder);
  with_values(name().c_str(), y_true, "values", [&](const auto* v) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t k = r * width; k < (r + 1) * width; ++k) s += static_cast<double>(v[k]);
      const double weight = w ? w[r] : 1.0;
      total_ += s * weight;
      count_ += weight * static_cast<double>(width);
    }
  });
}

void Mean::set_state(const std::vector<double>& state) { set_pair(name().c_str(), state, total_, count_); }

// ---- MeanMetricWrapper and the metrics built on it

int64_t MeanMetricWrapper::row_width(const Tensor& y_pred) { return y_pred.rank() >= 2 ? y_pred.dim(-1) : 1; }

void MeanMetricWrapper::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  if (y_pred.defined() && !y_pred.device().is_cpu() && device_score().kind != DeviceScore::kNone) {
    update_on_device(y_true, y_pred, sample_weight);
    return;
  }
  if (any_off_host({&y_true, &y_pred, &sample_weight})) {
    update_state(on_host(y_true), on_host(y_pred), on_host(sample_weight));
    return;
  }
  const char* who = name().c_str();
  STRATA_CHECK(y_pred.defined() && y_pred.dtype() == DType::kFloat32, InvalidArgument,
               who << ": y_pred must be a float32 tensor");
  STRATA_CHECK(y_pred.device().is_cpu(), Unavailable, who << ": y_pred on " << y_pred.device().str());
  const int64_t rows = rows_of(y_pred), width = row_width(y_pred);
  Tensor holder;
  const float* w = row_weights(who, sample_weight, rows, holder);
  scratch_.assign(static_cast<size_t>(rows), 0.0);
  score(y_true, y_pred, rows, width, scratch_.data());
  const double inv_width = width > 0 ? 1.0 / static_cast<double>(width) : 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const double weight = w ? w[r] : 1.0;
    total_ += scratch_[r] * inv_width * weight;
    count_ += weight;
  }
}

void MeanMetricWrapper::update_on_device(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  const char* who = name().c_str();
#ifndef STRATA_WITH_CUDA
  (void)y_true;
  (void)sample_weight;
  STRATA_THROW(Unavailable, who << ": y_pred on " << y_pred.device().str() << " in a build without CUDA");
#else
  using Kind = optim::cuda::MetricScore;
  static_assert(static_cast<int>(Kind::kAccuracy) == DeviceScore::kAccuracy &&
                    static_cast<int>(Kind::kSparseCategoricalAccuracy) == DeviceScore::kSparseCategoricalAccuracy &&
                    static_cast<int>(Kind::kCategoricalAccuracy) == DeviceScore::kCategoricalAccuracy &&
                    static_cast<int>(Kind::kBinaryAccuracy) == DeviceScore::kBinaryAccuracy &&
                    static_cast<int>(Kind::kSquaredError) == DeviceScore::kSquaredError,
                "the GPU's scores are numbered as DeviceScore's");
  STRATA_CHECK(y_pred.dtype() == DType::kFloat32, InvalidArgument, who << ": y_pred must be a float32 tensor");
  STRATA_CHECK(y_true.defined(), InvalidArgument, who << ": y_true is undefined");
  const DeviceScore kind = device_score();
  const Device device = y_pred.device();
  const int64_t rows = rows_of(y_pred), width = row_width(y_pred);
  const bool sparse = kind.kind == DeviceScore::kSparseCategoricalAccuracy;
  check_numel(who, y_true, sparse ? rows : y_pred.numel(), y_pred);
  const DType t_dtype = y_true.dtype();
  STRATA_CHECK(
      t_dtype == DType::kFloat32 || t_dtype == DType::kInt32 || t_dtype == DType::kInt64 || t_dtype == DType::kUInt8,
      InvalidArgument, who << ": y_true has unsupported dtype " << dtype_name(t_dtype));
  const Tensor t = y_true.device() == device ? y_true : y_true.to(device);
  Tensor w;
  if (sample_weight.defined()) {
    w = sample_weight.dtype() == DType::kFloat32 ? sample_weight : sample_weight.to(DType::kFloat32);
    STRATA_CHECK(w.numel() == rows, ShapeError,
                 who << ": sample_weight " << w.shape_str() << " needs one weight per example (" << rows << ")");
    if (w.device() != device) w = w.to(device);
  }
  const optim::cuda::MetricSums sums =
      optim::cuda::metric_sums(device.index, static_cast<Kind>(kind.kind), y_pred.data<float>(), t.raw_data(), t_dtype,
                               w.defined() ? w.data<float>() : nullptr, rows, width, kind.threshold);
  total_ += sums.total;
  count_ += sums.count;
#endif
}

void Accuracy::score(const Tensor& y_true, const Tensor& y_pred, int64_t rows, int64_t width, double* scores) const {
  check_numel(name().c_str(), y_true, y_pred.numel(), y_pred);
  const float* p = y_pred.data<float>();
  with_values(name().c_str(), y_true, "y_true", [&](const auto* t) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = r * width; k < (r + 1) * width; ++k) scores[r] += static_cast<double>(t[k]) == p[k] ? 1 : 0;
    }
  });
}

void SparseCategoricalAccuracy::score(const Tensor& y_true, const Tensor& y_pred, int64_t rows, int64_t width,
                                      double* scores) const {
  check_numel(name().c_str(), y_true, rows, y_pred);
  const float* p = y_pred.data<float>();
  with_values(name().c_str(), y_true, "y_true", [&](const auto* t) {
    for (int64_t r = 0; r < rows; ++r) {
      scores[r] = static_cast<double>(argmax_row(p + r * width, width)) == static_cast<double>(t[r]) ? width : 0;
    }
  });
}

void CategoricalAccuracy::score(const Tensor& y_true, const Tensor& y_pred, int64_t rows, int64_t width,
                                double* scores) const {
  check_numel(name().c_str(), y_true, y_pred.numel(), y_pred);
  const float* p = y_pred.data<float>();
  with_values(name().c_str(), y_true, "y_true", [&](const auto* t) {
    for (int64_t r = 0; r < rows; ++r) {
      scores[r] = argmax_row(p + r * width, width) == argmax_row(t + r * width, width) ? width : 0;
    }
  });
}

void BinaryAccuracy::score(const Tensor& y_true, const Tensor& y_pred, int64_t rows, int64_t width,
                           double* scores) const {
  check_numel(name().c_str(), y_true, y_pred.numel(), y_pred);
  const float* p = y_pred.data<float>();
  const float threshold = threshold_;
  with_values(name().c_str(), y_true, "y_true", [&](const auto* t) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = r * width; k < (r + 1) * width; ++k) {
        scores[r] += static_cast<double>(t[k]) == (p[k] > threshold ? 1.0 : 0.0) ? 1 : 0;
      }
    }
  });
}

void MeanSquaredError::score(const Tensor& y_true, const Tensor& y_pred, int64_t rows, int64_t width,
                             double* scores) const {
  check_numel(name().c_str(), y_true, y_pred.numel(), y_pred);
  const float* p = y_pred.data<float>();
  with_values(name().c_str(), y_true, "y_true", [&](const auto* t) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = r * width; k < (r + 1) * width; ++k) {
        const double d = static_cast<double>(t[k]) - p[k];
        scores[r] += d * d;
      }
    }
  });
}

// ---- Precision and Recall

namespace {
// Calls f(truth_positive, predicted_positive, weight) for every element.
template <class F>
void confusion(const char* who, const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight,
               float threshold, F&& f) {
  STRATA_CHECK(y_pred.defined() && y_pred.dtype() == DType::kFloat32, InvalidArgument,
               who << ": y_pred must be a float32 tensor");
  STRATA_CHECK(y_pred.device().is_cpu(), Unavailable, who << ": y_pred on " << y_pred.device().str());
  check_numel(who, y_true, y_pred.numel(), y_pred);
  const int64_t rows = rows_of(y_pred), width = y_pred.rank() >= 2 ? y_pred.dim(-1) : 1;
  Tensor holder;
  const float* w = row_weights(who, sample_weight, rows, holder);
  const float* p = y_pred.data<float>();
  with_values(who, y_true, "y_true", [&](const auto* t) {
    for (int64_t r = 0; r < rows; ++r) {
      const double weight = w ? w[r] : 1.0;
      for (int64_t k = r * width; k < (r + 1) * width; ++k) f(t[k] != 0, p[k] > threshold, weight);
    }
  });
}
}  // namespace

void Precision::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  if (any_off_host({&y_true, &y_pred, &sample_weight})) {
    update_state(on_host(y_true), on_host(y_pred), on_host(sample_weight));
    return;
  }
  confusion(name().c_str(), y_true, y_pred, sample_weight, threshold_, [this](bool truth, bool predicted, double w) {
    if (predicted) (truth ? tp_ : fp_) += w;
  });
}

void Precision::set_state(const std::vector<double>& state) { set_pair(name().c_str(), state, tp_, fp_); }

void Recall::update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
  if (any_off_host({&y_true, &y_pred, &sample_weight})) {
    update_state(on_host(y_true), on_host(y_pred), on_host(sample_weight));
    return;
  }
  confusion(name().c_str(), y_true, y_pred, sample_weight, threshold_, [this](bool truth, bool predicted, double w) {
    if (truth) (predicted ? tp_ : fn_) += w;
  });
}

void Recall::set_state(const std::vector<double>& state) { set_pair(name().c_str(), state, tp_, fn_); }

// ---- lookup

std::shared_ptr<Metric> get(const std::string& name, const std::string& loss_name) {
  std::string key;
  for (char c : name) key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (key == "accuracy" || key == "acc") {
    const std::string loss = losses::canonical_name(loss_name);
    if (loss == "sparse_categorical_crossentropy") return std::make_shared<SparseCategoricalAccuracy>(name);
    if (loss == "categorical_crossentropy") return std::make_shared<CategoricalAccuracy>(name);
    if (loss == "binary_crossentropy") return std::make_shared<BinaryAccuracy>(name);
    return std::make_shared<Accuracy>(name);
  }
  if (key == "sparse_categorical_accuracy") return std::make_shared<SparseCategoricalAccuracy>();
  if (key == "categorical_accuracy") return std::make_shared<CategoricalAccuracy>();
  if (key == "binary_accuracy") return std::make_shared<BinaryAccuracy>();
  if (key == "mse" || key == "mean_squared_error") return std::make_shared<MeanSquaredError>(name);
  if (key == "precision") return std::make_shared<Precision>();
  if (key == "recall") return std::make_shared<Recall>();
  if (key == "mean") return std::make_shared<Mean>();
  STRATA_THROW(InvalidArgument, "metrics::get: unknown metric '"
                                    << name << "'; known: accuracy (acc), sparse_categorical_accuracy, "
                                    << "categorical_accuracy, binary_accuracy, mean_squared_error (mse), precision, "
                                    << "recall, mean");
}

}  // namespace strata::metrics
