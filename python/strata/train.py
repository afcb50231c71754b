"""strata.train: tf.train's ClusterSpec (the cluster of strata.distribute.cluster_resolver), so that tutorial code
with `import strata as tf` writes tf.train.ClusterSpec as in TensorFlow. Thread-safety: plain values."""

from .cluster_resolver import ClusterSpec

__all__ = ["ClusterSpec"]
