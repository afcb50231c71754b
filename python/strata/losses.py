"""strata.losses: the C++ losses under Keras's names; `get` turns compile()'s string into one.
Thread-safety: as the C++ losses."""

from . import _strata
from ._strata import (BinaryCrossentropy, CategoricalCrossentropy, Loss, MeanAbsoluteError, MeanSquaredError,
                      SparseCategoricalCrossentropy)


def get(identifier):
    """A Loss from a Keras name ("sparse_categorical_crossentropy", "mse", ...) or a Loss (returned as is)."""
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str):
        return _strata.loss_by_name(identifier)
    raise TypeError(f"loss must be a name or a strata.losses object, got {type(identifier).__name__}")


__all__ = ["Loss", "SparseCategoricalCrossentropy", "CategoricalCrossentropy", "BinaryCrossentropy",
           "MeanSquaredError", "MeanAbsoluteError", "get"]
