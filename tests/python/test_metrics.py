# strata.metrics objects in compile beside names: evaluate's values equal numpy's computation on predict's outputs,
# under Keras's names (or the name= given), in History and in evaluate's dict; unknown names and other types are
# refused. Thread-safety: one test process.
import numpy as np
import pytest

import strata
from strata import layers


def classifier(metrics):
    strata.utils.set_random_seed(2)
    model = strata.Sequential([layers.Input((6,)), layers.Dense(3)])
    model.compile(optimizer="sgd", loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=metrics)
    return model


def test_sparse_categorical_accuracy_object_equals_numpy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 6)).astype(np.float32)
    y = rng.integers(0, 3, size=50).astype(np.int64)
    model = classifier(["accuracy", strata.metrics.SparseCategoricalAccuracy(),
                        strata.metrics.SparseCategoricalAccuracy(name="acc")])
    logs = model.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)
    expected = float(np.mean(np.argmax(model.predict(x), axis=1) == y))
    assert list(logs) == ["loss", "accuracy", "sparse_categorical_accuracy", "acc"]
    assert logs["sparse_categorical_accuracy"] == pytest.approx(expected)
    assert logs["acc"] == pytest.approx(expected)
    assert logs["accuracy"] == pytest.approx(expected)
    history = model.fit(x, y, epochs=1, batch_size=16, verbose=0, validation_data=(x, y)).history
    assert {"acc", "val_acc", "sparse_categorical_accuracy", "val_sparse_categorical_accuracy"} <= set(history)


def test_regression_and_binary_metrics_equal_numpy():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 6)).astype(np.float32)
    y = (rng.random(size=(40, 1)) > 0.5).astype(np.float32)
    strata.utils.set_random_seed(3)
    model = strata.Sequential([layers.Input((6,)), layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="sgd", loss="binary_crossentropy",
                  metrics=[strata.metrics.MeanSquaredError(), strata.metrics.BinaryAccuracy(threshold=0.4),
                           strata.metrics.Precision(), strata.metrics.Recall(thresholds=0.6)])
    logs = model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    p = model.predict(x)
    truth = y > 0.5
    assert logs["mean_squared_error"] == pytest.approx(float(np.mean((p - y) ** 2)), rel=1e-5)
    assert logs["binary_accuracy"] == pytest.approx(float(np.mean((p > 0.4) == truth)))
    positive = p > 0.5
    assert logs["precision"] == pytest.approx(float(np.sum(positive & truth) / max(np.sum(positive), 1)))
    positive = p > 0.6
    assert logs["recall"] == pytest.approx(float(np.sum(positive & truth) / max(np.sum(truth), 1)))


def test_metric_objects_have_keras_names_and_unknown_ones_are_refused():
    assert strata.metrics.SparseCategoricalAccuracy().name == "sparse_categorical_accuracy"
    assert strata.metrics.Mean().name == "mean"
    assert strata.metrics.get("mse").name == "mse"
    with pytest.raises(ValueError, match="nonsense"):
        classifier(["nonsense"])
    with pytest.raises(TypeError, match="strata.metrics object"):
        classifier([42])


def test_update_state_and_result_equal_numpy():
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 4, size=30)
    scores = rng.random(size=(30, 4))  # float64 and int64 from numpy, converted as Keras converts them
    metric = strata.metrics.SparseCategoricalAccuracy()
    metric.update_state(labels[:10], scores[:10])
    metric.update_state(labels[10:], scores[10:])
    assert metric.result() == pytest.approx(float(np.mean(np.argmax(scores, axis=1) == labels)))
    metric.reset_state()
    assert metric.result() == 0.0

    mean = strata.metrics.Mean()
    mean.update_state([1.0, 2.0, 3.0])
    mean.update_state([5.0], sample_weight=[3.0])
    assert mean.result() == pytest.approx((1 + 2 + 3 + 5 * 3) / 6)

    mse = strata.metrics.MeanSquaredError()
    truth, predicted = rng.random(size=(8, 3)), rng.random(size=(8, 3))
    mse.update_state(truth, predicted)
    assert mse.result() == pytest.approx(float(np.mean((truth - predicted) ** 2)), rel=1e-5)
