"""strata.nn: tf.nn's loss helpers for custom training loops under a strategy, over strata::distribute's:
compute_average_loss (per-example losses summed and divided by the global batch, so the replicas' losses sum to the
global batch's mean) and scale_regularization_loss. Thread-safety: call them on a replica's thread inside
strategy.run, or anywhere without a strategy."""

from ._strata import compute_average_loss, scale_regularization_loss

__all__ = ["compute_average_loss", "scale_regularization_loss"]
