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


class CommunicationImplementation:
    """tf.distribute.experimental.CommunicationImplementation: how the workers' collectives travel. AUTO is MPI under
    mpirun, else RING (Gloo's ring all-reduce over TCP); NCCL needs strata's CUDA build."""

    AUTO = "auto"
    RING = "ring"
    NCCL = "nccl"
    MPI = "mpi"


class CommunicationOptions:
    """tf.distribute.experimental.CommunicationOptions: bytes_per_pack (0: the default 25 MiB buckets),
    timeout_seconds (None: 300 s; every collective is bounded by it) and implementation."""

    def __init__(self, bytes_per_pack=0, timeout_seconds=None, implementation=CommunicationImplementation.AUTO):
        if bytes_per_pack < 0:
            raise ValueError(f"bytes_per_pack must be >= 0, got {bytes_per_pack}")
        if timeout_seconds is not None and timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be > 0 (or None), got {timeout_seconds}")
        self.bytes_per_pack = bytes_per_pack
        self.timeout_seconds = timeout_seconds
        self.implementation = implementation


class experimental:  # noqa: N801 (tf.distribute.experimental's names)
    CommunicationImplementation = CommunicationImplementation
    CommunicationOptions = CommunicationOptions


class MultiWorkerMirroredStrategy(Strategy):
    """Synchronous data parallelism across processes (workers), each with a copy of every variable, gradients
    all-reduced every step. The cluster comes from TF_CONFIG (`python -m strata.launch --workers N script.py` sets
    it), mpirun or torchrun; none: a single worker. Each worker takes its share of its host's cores (STRATA_NUM_THREADS
    overrides it). Making the strategy waits for every worker (up to 60 s); fit shards each global batch across the
    workers, as Keras does."""

    def __init__(self, cluster_resolver=None, communication_options=None):
        if cluster_resolver is not None:
            raise ValueError("cluster_resolver: strata reads the cluster from TF_CONFIG (or mpirun, torchrun); "
                             "pass None")
        options = communication_options or CommunicationOptions()
        super().__init__(_strata.MultiWorkerMirroredStrategy(
            implementation=options.implementation,
            bytes_per_pack=options.bytes_per_pack or (25 << 20),
            timeout_seconds=float(options.timeout_seconds or 300.0)))

    @property
    def num_workers(self):
        return self._native.num_workers

    @property
    def worker_index(self):
        return self._native.worker_index


def get_strategy():
    """The strategy of the innermost open scope on this thread, or None (the default strategy)."""
    stack = _scopes()
    return stack[-1] if stack else None


__all__ = ["Strategy", "OneDeviceStrategy", "MirroredStrategy", "MultiWorkerMirroredStrategy", "CommunicationOptions",
           "CommunicationImplementation", "experimental", "get_strategy"]
