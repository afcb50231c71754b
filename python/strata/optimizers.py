"""strata.optimizers: Keras's optimizer classes, each made by the C++ optimizer registry (optim::from_config) with
Keras's argument names; `get` turns compile()'s string into one. Thread-safety: as the C++ optimizers."""

from . import _strata
from ._strata import Optimizer

_SHARED = ("clipnorm", "clipvalue", "global_clipnorm", "weight_decay")


def _make(name, learning_rate, hyperparameters, shared):
    numeric = {key: float(value) for key, value in hyperparameters.items() if value is not None}
    return _strata.make_optimizer(name, learning_rate, numeric, **{k: shared.get(k) for k in _SHARED})


def SGD(learning_rate=0.01, momentum=0.0, nesterov=False, **shared):
    return _make("sgd", learning_rate, {"momentum": momentum, "nesterov": nesterov}, shared)


def Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, **shared):
    return _make("adam", learning_rate,
                 {"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon, "amsgrad": amsgrad}, shared)


def AdamW(learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, **shared):
    return _make("adamw", learning_rate,
                 {"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon, "amsgrad": amsgrad},
                 dict(shared, weight_decay=weight_decay))


def RMSprop(learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False, **shared):
    return _make("rmsprop", learning_rate,
                 {"rho": rho, "momentum": momentum, "epsilon": epsilon, "centered": centered}, shared)


def Adagrad(learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7, **shared):
    return _make("adagrad", learning_rate,
                 {"initial_accumulator_value": initial_accumulator_value, "epsilon": epsilon}, shared)


def get(identifier):
    """An Optimizer from a Keras name ("adam", "sgd", ...; its defaults) or an Optimizer (returned as is)."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str):
        return _strata.make_optimizer(identifier)
    raise TypeError(f"optimizer must be a name or a strata.optimizers object, got {type(identifier).__name__}")


__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "get"]
