"""strata.distribute: tf.distribute's strategies over the C++ ones. A model made inside `with strategy.scope():`
remembers the strategy, and its fit / evaluate / predict run under it (building its variables there on the first
batch, as Keras does). Thread-safety: one thread drives a strategy; a scope belongs to the thread that opened it."""

import contextlib
import threading

from . import _strata

_open_scopes = threading.local()


def _scopes():
    if not hasattr(_open_scopes, "stack"):
        _open_scopes.stack = []
    return _open_scopes.stack


class Strategy:
    """What OneDeviceStrategy and MirroredStrategy share: scope(), num_replicas_in_sync."""

    def __init__(self, native):
        self._native = native

    @contextlib.contextmanager
    def scope(self):
        handle = self._native.enter_scope()
        _scopes().append(self)
        try:
            yield self
        finally:
            _scopes().pop()
            handle.close()

    @property
    def num_replicas_in_sync(self):
        return self._native.num_replicas_in_sync

    @property
    def extended(self):
        return self

    @property
    def worker_devices(self):
        return tuple(self._native.devices)

    def __repr__(self):
        return f"<strata.distribute.{self._native.name} devices={list(self._native.devices)}>"


class OneDeviceStrategy(Strategy):
    """Every step on one device: "/cpu:0" (or "/gpu:0" in a CUDA build)."""

    def __init__(self, device="/cpu:0"):
        super().__init__(_strata.OneDeviceStrategy(device))


class MirroredStrategy(Strategy):
    """Synchronous data parallelism over the replicas of one machine, one per device ("/cpu:0", "/cpu:1", ...; none
    given: one replica on "/cpu:0"), each with a copy of every variable, gradients all-reduced every step."""

    def __init__(self, devices=None):
        super().__init__(_strata.MirroredStrategy(list(devices or [])))


def get_strategy():
    """The strategy of the innermost open scope on this thread, or None (the default strategy)."""
    stack = _scopes()
    return stack[-1] if stack else None


__all__ = ["Strategy", "OneDeviceStrategy", "MirroredStrategy", "get_strategy"]
