"""strata for Python: Keras's API (Sequential, layers, compile/fit/evaluate/predict, tf.distribute strategies) over
strata's C++ core, which the extension module strata._strata binds (a thin binding: every computation is the C++
library's). Thread-safety: as Keras, one thread drives a model at a time; fit releases the GIL while it computes."""

from . import callbacks, distribute, layers, losses, optimizers, utils
from .models import History, Sequential

__all__ = ["Sequential", "History", "callbacks", "distribute", "layers", "losses", "optimizers", "utils"]
