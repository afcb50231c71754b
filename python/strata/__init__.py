"""strata for Python: Keras's API (Sequential, layers, compile/fit/evaluate/predict, tf.distribute strategies) over
strata's C++ core, which the extension module strata._strata binds (a thin binding: every computation is the C++
library's). Thread-safety: as Keras, one thread drives a model at a time; fit releases the GIL while it computes."""

from . import callbacks, distribute, layers, losses, metrics, optimizers, utils
from .layers import Input
from .models import History, Model, Sequential

__all__ = ["Model", "Sequential", "Input", "History", "callbacks", "distribute", "layers", "losses", "metrics",
           "optimizers", "utils"]
