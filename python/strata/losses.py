"""strata.losses: the C++ losses under Keras's names; `get` turns compile()'s string into one.
Thread-safety: as the C++ losses."""

from . import _strata
from ._strata import (BinaryCrossentropy, CategoricalCrossentropy, Loss, MeanAbsoluteError, MeanSquaredError,
                      SparseCategoricalCrossentropy)


class Reduction:
    """keras.losses.Reduction: what a loss called as loss(y_true, y_pred) returns (reduction= of each loss)."""

    AUTO = "auto"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"


def get(identifier):
    """A Loss from a Keras name ("sparse_categorical_crossentropy", "mse", ...) or a Loss (returned as is)."""
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str):
        return _strata.loss_by_name(identifier)
    raise TypeError(f"loss must be a name or a strata.losses object, got {type(identifier).__name__}")


__all__ = ["Loss", "SparseCategoricalCrossentropy", "CategoricalCrossentropy", "BinaryCrossentropy",
           "MeanSquaredError", "MeanAbsoluteError", "Reduction", "get"]
