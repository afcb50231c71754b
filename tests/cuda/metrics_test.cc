// Metrics on the GPU (optim/cuda/metrics.cu): the accuracies and mean_squared_error fed predictions on the device
// give the host's state (counts exactly, weighted sums to double rounding) for every label dtype, with and without
// sample weights, with labels on the host or the device; ties take the first maximum as on the host; a bad shape is
// the host's error. Without a GPU each test says so and skips.
#include "strata/optim/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "strata/error.h"

namespace strata {
namespace {

constexpr int64_t kRows = 1000, kClasses = 10;

// Integer class labels in [0, classes) as `dtype`, shaped `shape`.
Tensor labels(const Shape& shape, int64_t classes, DType dtype, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape, DType::kInt64);
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = std::min<int64_t>(classes - 1, static_cast<int64_t>(gen.uniform() * static_cast<double>(classes)));
  return t.to(dtype);
}

Tensor one_hot(const Tensor& sparse, int64_t classes) {
  const Tensor idx = sparse.to(DType::kInt64);
  Tensor t = Tensor::zeros({idx.numel(), classes});
  for (int64_t r = 0; r < idx.numel(); ++r) t.data<float>()[r * classes + idx.data<int64_t>()[r]] = 1.0f;
  return t;
}

// The state `metric` reaches from the host tensors, and from the same tensors with y_pred (and the weights, and with
// `labels_on_gpu` y_true) on the GPU.
void expect_device_matches_host(const metrics::Metric& metric, const Tensor& y_true, const Tensor& y_pred,
                                const Tensor& weights, bool labels_on_gpu, const std::string& what) {
  SCOPED_TRACE(what);
  const std::shared_ptr<metrics::Metric> host = metric.clone(), device = metric.clone();
  host->update_state(y_true, y_pred, weights);
  host->update_state(y_true, y_pred, weights);  // twice: the state accumulates
  const Tensor t = labels_on_gpu ? testing::on_gpu(y_true) : y_true;
  device->update_state(t, testing::on_gpu(y_pred), testing::on_gpu(weights));
  device->update_state(t, testing::on_gpu(y_pred), testing::on_gpu(weights));
  const std::vector<double> want = host->state(), got = device->state();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (weights.defined()) {
      EXPECT_NEAR(got[i], want[i], 1e-9 * (1 + std::fabs(want[i]))) << "state " << i;
    } else {
      EXPECT_EQ(got[i], want[i]) << "state " << i << ": an unweighted count is exact";
    }
  }
}

TEST(GpuMetricsTest, SparseCategoricalAccuracyMatchesTheHostForEveryLabelDtype) {
  STRATA_REQUIRE_GPU();
  const Tensor logits = testing::random_host({kRows, kClasses}, 3);
  const Tensor weights = testing::random_host({kRows}, 4, 0.0f, 2.0f);
  metrics::SparseCategoricalAccuracy acc;
  for (DType dtype : {DType::kInt32, DType::kInt64, DType::kUInt8, DType::kFloat32}) {
    for (const Shape& shape : {Shape{kRows}, Shape{kRows, 1}}) {
      const Tensor y = labels(shape, kClasses, dtype, 5);
      const std::string what = std::string(dtype_name(dtype)) + " labels " + y.shape_str();
      expect_device_matches_host(acc, y, logits, Tensor(), /*labels_on_gpu=*/true, what);
      expect_device_matches_host(acc, y, logits, Tensor(), /*labels_on_gpu=*/false, what + " on the host");
      expect_device_matches_host(acc, y, logits, weights, /*labels_on_gpu=*/true, what + " weighted");
    }
  }
}

TEST(GpuMetricsTest, TiesTakeTheFirstMaximumAsOnTheHost) {
  STRATA_REQUIRE_GPU();
  // Rows of equal logits: argmax is 0, so label 0 scores and label 1 does not.
  const Tensor logits = Tensor::full({4, 3}, 0.5);
  const Tensor y = Tensor::from_vector<int32_t>({0, 1, 0, 2});
  metrics::SparseCategoricalAccuracy acc;
  acc.update_state(testing::on_gpu(y), testing::on_gpu(logits));
  EXPECT_EQ(acc.state(), (std::vector<double>{2, 4}));
  expect_device_matches_host(metrics::CategoricalAccuracy(), one_hot(y, 3), logits, Tensor(), true, "categorical");
}

TEST(GpuMetricsTest, TheOtherAccuraciesAndMeanSquaredErrorMatchTheHost) {
  STRATA_REQUIRE_GPU();
  const Tensor logits = testing::random_host({kRows, kClasses}, 6);
  const Tensor weights = testing::random_host({kRows}, 7, 0.0f, 2.0f);
  const Tensor sparse = labels({kRows}, kClasses, DType::kInt64, 8);
  const Tensor hot = one_hot(sparse, kClasses);
  for (const Tensor& w : {Tensor(), weights}) {
    const std::string weighted = w.defined() ? " weighted" : "";
    expect_device_matches_host(metrics::CategoricalAccuracy(), hot, logits, w, true, "categorical" + weighted);
    // Probabilities against 0/1 targets, and a threshold of its own.
    const Tensor probs = testing::random_host({kRows, 3}, 9, 0.0f, 1.0f);
    const Tensor targets = labels({kRows, 3}, 2, DType::kFloat32, 10);
    expect_device_matches_host(metrics::BinaryAccuracy(), targets, probs, w, true, "binary" + weighted);
    expect_device_matches_host(metrics::BinaryAccuracy("b", 0.7f), targets.to(DType::kUInt8), probs, w, true,
                               "binary at 0.7" + weighted);
    // Exact equality: predictions that are the labels, half of them perturbed.
    Tensor exact = targets.clone();
    for (int64_t i = 0; i < exact.numel(); i += 2) exact.data<float>()[i] += 0.25f;
    expect_device_matches_host(metrics::Accuracy(), targets, exact, w, true, "accuracy" + weighted);
    expect_device_matches_host(metrics::MeanSquaredError(), testing::random_host({kRows, 4}, 11),
                               testing::random_host({kRows, 4}, 12), w, true, "mse" + weighted);
    // Rank-1 predictions: one element per example.
    expect_device_matches_host(metrics::BinaryAccuracy(), targets.reshape({kRows * 3}), probs.reshape({kRows * 3}),
                               Tensor(), true, "binary rank 1" + weighted);
  }
}

TEST(GpuMetricsTest, RowsOfABatchViewAndAnEmptyBatch) {
  STRATA_REQUIRE_GPU();
  const Tensor logits = testing::random_host({kRows, kClasses}, 13);
  const Tensor y = labels({kRows}, kClasses, DType::kInt32, 14);
  metrics::SparseCategoricalAccuracy host, device;
  host.update_state(y.slice(100, 350), logits.slice(100, 350));
  device.update_state(testing::on_gpu(y).slice(100, 350), testing::on_gpu(logits).slice(100, 350));
  EXPECT_EQ(device.state(), host.state());
  device.update_state(testing::on_gpu(y).slice(0, 0), testing::on_gpu(logits).slice(0, 0));
  EXPECT_EQ(device.state(), host.state()) << "an empty replica batch adds nothing";
}

TEST(GpuMetricsTest, ABadShapeOrDtypeIsTheHostsError) {
  STRATA_REQUIRE_GPU();
  const Tensor logits = testing::on_gpu(testing::random_host({8, 4}, 15));
  metrics::SparseCategoricalAccuracy acc;
  EXPECT_THROW(acc.update_state(testing::on_gpu(Tensor::zeros({7}, DType::kInt32)), logits), ShapeError);
  EXPECT_THROW(acc.update_state(testing::on_gpu(Tensor::zeros({8}, DType::kBFloat16)), logits), InvalidArgument);
  EXPECT_THROW(
      acc.update_state(testing::on_gpu(Tensor::zeros({8}, DType::kInt32)), logits, testing::on_gpu(Tensor::ones({3}))),
      ShapeError);
  EXPECT_EQ(acc.state(), (std::vector<double>{0, 0})) << "a refused update leaves the state";
  // Precision has no device path: it still copies to the host and counts as there.
  metrics::Precision precision;
  precision.update_state(testing::on_gpu(Tensor::from_vector<float>({1, 0, 1})),
                         testing::on_gpu(Tensor::from_vector<float>({0.9f, 0.8f, 0.1f})));
  EXPECT_EQ(precision.state(), (std::vector<double>{1, 1}));
}

}  // namespace
}  // namespace strata
