"""strata.metrics: Keras's metric classes over the C++ metrics, for compile(metrics=[...]) beside names such as
"accuracy". compile takes a fresh copy of each; the values appear in History and evaluate under the metric's name
(Keras's: "sparse_categorical_accuracy", or the name= given). Thread-safety: as the C++ metrics."""

from ._strata.metrics import (Accuracy, BinaryAccuracy, CategoricalAccuracy, Mean, MeanSquaredError, Metric,
                              Precision, Recall, SparseCategoricalAccuracy, metric_by_name)

MSE = MeanSquaredError


def get(identifier, loss_name=""):
    """A metric object from a name ("accuracy", "mse", ...) or a metric object itself."""
    if isinstance(identifier, Metric):
        return identifier
    return metric_by_name(str(identifier), loss_name)


__all__ = ["Metric", "Mean", "Accuracy", "SparseCategoricalAccuracy", "CategoricalAccuracy", "BinaryAccuracy",
           "MeanSquaredError", "MSE", "Precision", "Recall", "get"]
