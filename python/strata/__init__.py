"""strata for Python: Keras's API (Sequential, layers, compile/fit/evaluate/predict, tf.distribute strategies,
tf.data's Dataset, GradientTape custom loops) over strata's C++ core, which the extension module strata._strata binds
(a thin binding: every computation is the C++ library's). `strata.keras` is the package itself, so code written
against `tf.keras.*` runs with `import strata as tf`. Thread-safety: as Keras, one thread drives a model at a time;
fit releases the GIL while it computes; strategy.run's replicas are threads that take the GIL only to run Python."""

import sys

from . import callbacks, data, datasets, distribute, io, layers, losses, metrics, nn, optimizers, train, utils
from ._strata import GradientTape, Variable
from .layers import Input
from .models import History, Model, Sequential

keras = sys.modules[__name__]  # tf.keras.layers, tf.keras.losses, ... as in TensorFlow's tutorials


def function(fn=None, **kwargs):
    """tf.function as a no-op: strata runs Python eagerly and its C++ core is compiled already, so the decorated
    function is returned as it is (the keyword arguments, such as jit_compile, are accepted and ignored)."""
    del kwargs
    return fn if fn is not None else (lambda f: f)


__all__ = ["Model", "Sequential", "Input", "History", "GradientTape", "Variable", "callbacks", "data", "datasets", "distribute",
           "io", "keras", "layers", "losses", "metrics", "nn", "optimizers", "train", "utils",
           "function"]
