"""strata.distribute: tf.distribute's strategies over the C++ ones. A model made inside `with strategy.scope():`
remembers the strategy, and its fit / evaluate / predict run under it (building its variables there on the first
batch, as Keras does). Thread-safety: one thread drives a strategy; a scope belongs to the thread that opened it."""

import contextlib
import threading

from . import _strata
from .data import Dataset, _structure

_open_scopes = threading.local()


def _scopes():
    if not hasattr(_open_scopes, "stack"):
        _open_scopes.stack = []
    return _open_scopes.stack


class ReduceOp:
    """tf.distribute.ReduceOp: how strategy.reduce combines the replicas' values."""

    SUM = "SUM"
    MEAN = "MEAN"


class PerReplica:
    """One value per local replica (tf.distribute's PerReplica): what iterating a distributed dataset gives and
    strategy.run returns. `values` lists them in replica order."""

    def __init__(self, values):
        self.values = tuple(values)

    def __repr__(self):
        return f"PerReplica({list(self.values)!r})"


def experimental_local_results(value):
    return value.values if isinstance(value, PerReplica) else (value,)


class DistributedDataset:
    """strategy.experimental_distribute_dataset(dataset): each element of `dataset` is a global batch; iterating
    splits it along its first axis over the replicas (C++ distribute::DistributedDataset) and yields a PerReplica of
    each replica's part, shaped like the dataset's elements (numpy arrays)."""

    def __init__(self, native, single):
        self._native = native
        self._single = single

    def __iter__(self):
        iterator = self._native.make_iterator()
        while True:
            batch = iterator.next()
            if batch is None:
                return
            replicas, names = batch
            yield PerReplica(_structure(arrays, names, self._single) for arrays in replicas)


def _replica_value(value, replica):
    if isinstance(value, PerReplica):
        return value.values[replica]
    if isinstance(value, tuple):
        return tuple(_replica_value(v, replica) for v in value)
    if isinstance(value, list):
        return [_replica_value(v, replica) for v in value]
    if isinstance(value, dict):
        return {k: _replica_value(v, replica) for k, v in value.items()}
    return value


class Strategy:
    """What OneDeviceStrategy and MirroredStrategy share: scope(), num_replicas_in_sync, and for custom loops
    experimental_distribute_dataset, run and reduce."""

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

    def experimental_distribute_dataset(self, dataset, options=None):
        """A DistributedDataset over a strata.data.Dataset of global batches."""
        del options
        if not isinstance(dataset, Dataset):
            raise TypeError(f"experimental_distribute_dataset: expected a strata.data.Dataset, got "
                            f"{type(dataset).__name__}")
        return DistributedDataset(self._native.experimental_distribute_dataset(dataset._native), dataset._single)

    def run(self, fn, args=(), kwargs=None):
        """Runs fn(*args, **kwargs) on every replica, each in its replica context on its own thread (one replica: this
        thread), PerReplica arguments unpacked to the replica's value (also inside tuples, lists and dicts). Returns a
        PerReplica of the results (None when every replica returned None). While a replica computes in strata it
        does not hold the GIL; the Python parts of the replicas take turns."""
        kwargs = dict(kwargs or {})

        def call(replica):
            return fn(*_replica_value(tuple(args), replica), **_replica_value(kwargs, replica))

        results = self._native.run_on_replicas(call)
        if all(r is None for r in results):
            return None
        return PerReplica(results)

    def reduce(self, reduce_op, value, axis=None):
        """The replicas' values (a PerReplica of strata.Variables, arrays or numbers) summed or averaged element-wise
        (axis None), or over `axis` of the values concatenated along it, as tf.distribute does; a numpy array. A
        value that is not PerReplica counts as the same on every replica."""
        op = _reduce_op_name(reduce_op)
        values = list(value.values) if isinstance(value, PerReplica) else [value] * self._native.num_local_replicas
        return self._native.reduce(op, values, axis)

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


def _reduce_op_name(reduce_op):
    name = str(reduce_op).upper()
    if name.startswith("REDUCEOP."):
        name = name[len("REDUCEOP."):]
    if name not in ("SUM", "MEAN"):
        raise ValueError(f"reduce: reduce_op is strata.distribute.ReduceOp.SUM or .MEAN ('SUM' or 'MEAN'), got "
                         f"{reduce_op!r}")
    return name


def get_strategy():
    """The strategy of the innermost open scope on this thread, or None (the default strategy)."""
    stack = _scopes()
    return stack[-1] if stack else None


__all__ = ["ReduceOp", "PerReplica", "DistributedDataset", "experimental_local_results", "Strategy", "OneDeviceStrategy", "MirroredStrategy", "MultiWorkerMirroredStrategy", "CommunicationOptions",
           "CommunicationImplementation", "experimental", "get_strategy"]
