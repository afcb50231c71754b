"""strata.distribute: tf.distribute's strategies over the C++ ones (one-device, mirrored, central storage, pipeline,
multi-worker mirrored, parameter server). A model made inside `with strategy.scope():`
remembers the strategy, and its fit / evaluate / predict run under it (building its variables there on the first
batch, as Keras does). Thread-safety: one thread drives a strategy; a scope belongs to the thread that opened it."""

import contextlib
import threading

from . import _strata
from . import cluster_resolver
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
    """What every strategy shares: scope(), num_replicas_in_sync, and for custom loops
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


def _is_host_device(device):
    return str(device).lower().replace("/device:", "/").replace("/job:localhost/replica:0/task:0", "") in (
        "/cpu:0", "cpu:0", "/cpu", "cpu")


class CentralStorageStrategy(Strategy):
    """tf.distribute.experimental.CentralStorageStrategy: synchronous data parallelism over the replicas of one
    machine ("/cpu:0", "/cpu:1", ...; none given: one per core this process may use, as MirroredStrategy), with one
    copy of every variable on the host: the replicas' gradients are summed and that copy updated once a step.
    parameter_device is the host ("/cpu:0", or None); strata keeps central storage nowhere else."""

    def __init__(self, compute_devices=None, parameter_device=None):
        if parameter_device is not None and not _is_host_device(parameter_device):
            raise ValueError(f"CentralStorageStrategy: parameter_device must be None or '/cpu:0' (strata keeps the "
                             f"variables on the host), got {parameter_device!r}")
        if isinstance(compute_devices, str):
            raise TypeError("CentralStorageStrategy: compute_devices is a list of devices, e.g. ['/cpu:0', '/cpu:1']")
        super().__init__(_strata.CentralStorageStrategy(list(compute_devices or [])))


class _WorkerGroupMember:
    """num_workers and worker_index of a strategy whose native side is one worker of a group."""

    @property
    def num_workers(self):
        return self._native.num_workers

    @property
    def worker_index(self):
        return self._native.worker_index


class PipelineStrategy(_WorkerGroupMember, Strategy):
    """strata's pipeline parallelism (no TensorFlow counterpart): a Sequential model's training steps run as a pipeline
    of `stages` stages (threads of this process), each global batch split into `micro_batches` micro-batches run in
    the order of `schedule` ("gpipe", "1f1b", "interleaved" with `chunks` model chunks per stage, "zb-h1"). The layers
    are cut at `bounds` (indices of the layers where stages 1, 2, ... start) or balanced by measured time
    (balance="time") or parameter count ("parameters"); recompute=True keeps only each stage's input between a
    micro-batch's passes. The weights after each step are the unsplit model's; evaluate and predict run the whole
    model on the calling thread. Under `python -m strata.launch --workers N` (TF_CONFIG) each worker runs a pipeline
    replica on its share of each global batch and the stages' gradients are all-reduced across the workers
    (communication_options as MultiWorkerMirroredStrategy's), so N workers train as one pipeline on the whole batches;
    making the strategy then waits for every worker. Each process takes its share of its host's cores."""

    def __init__(self, stages=2, micro_batches=4, schedule="1f1b", chunks=0, bounds=None, balance="time",
                 recompute=False, communication_options=None):
        for name, value, least in (("stages", stages, 1), ("micro_batches", micro_batches, 1), ("chunks", chunks, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"PipelineStrategy: {name} must be an integer >= {least}, got {value!r}")
        schedules = ("gpipe", "1f1b", "interleaved", "zb-h1")
        if schedule not in schedules:
            raise ValueError(f"PipelineStrategy: schedule must be one of {', '.join(schedules)}, got {schedule!r}")
        options = communication_options or CommunicationOptions()
        super().__init__(_strata.PipelineStrategy(stages=stages, micro_batches=micro_batches, schedule=schedule,
                                                  chunks=chunks, bounds=[int(b) for b in (bounds or [])],
                                                  balance=balance, recompute=bool(recompute),
                                                  **options.native_kwargs()))

    @property
    def layout(self):
        """The last cut of the model's layers, a bracket per (virtual) stage: "[dense] [dense_1]"; "" before fit."""
        return self._native.layout


class _Partitioners:
    """tf.distribute.experimental.partitioners: how ParameterServerStrategy splits each variable along its first axis
    over the ps tasks (shard i on ps i % num_ps). Calling one with (shape, dtype) gives TensorFlow's partitions."""

    class _Partitioner:
        def __call__(self, shape, dtype=None):
            del dtype  # strata's variables are float32
            return list(self._native.partitions([int(d) for d in shape]))

    class FixedShardsPartitioner(_Partitioner):
        def __init__(self, num_shards):
            if num_shards < 1:
                raise ValueError(f"FixedShardsPartitioner: num_shards must be >= 1, got {num_shards}")
            self._native = _strata.FixedShardsPartitioner(int(num_shards))

    class MinSizePartitioner(_Partitioner):
        def __init__(self, min_shard_bytes=256 << 10, max_shards=1, bytes_per_string=16):
            del bytes_per_string  # strata has no string tensors
            if min_shard_bytes < 1 or max_shards < 1:
                raise ValueError(f"MinSizePartitioner: min_shard_bytes and max_shards must be >= 1, got "
                                 f"{min_shard_bytes} and {max_shards}")
            self._native = _strata.MinSizePartitioner(int(min_shard_bytes), int(max_shards))

    class MaxSizePartitioner(_Partitioner):
        def __init__(self, max_shard_bytes, max_shards=None, bytes_per_string=16):
            del bytes_per_string
            if max_shard_bytes < 1 or (max_shards is not None and max_shards < 1):
                raise ValueError(f"MaxSizePartitioner: max_shard_bytes (and max_shards) must be >= 1, got "
                                 f"{max_shard_bytes} and {max_shards}")
            self._native = _strata.MaxSizePartitioner(int(max_shard_bytes),
                                                      None if max_shards is None else int(max_shards))


partitioners = _Partitioners


def _tf_config_of_resolver(resolver, what):
    if not hasattr(resolver, "cluster_spec"):
        raise TypeError(f"{what}: expected a cluster resolver (strata.distribute.cluster_resolver."
                        f"TFConfigClusterResolver()), got {type(resolver).__name__}")
    spec = cluster_resolver.ClusterSpec(resolver.cluster_spec())
    for job in ("chief", "worker", "ps"):
        if spec.num_tasks(job) < 1:
            raise ValueError(f"{what}: the cluster needs a chief, at least one worker and one ps task; it has no "
                             f"'{job}' job (cluster: {spec.as_dict()}; `python -m strata.launch --chief --workers N "
                             f"--ps M script.py` makes one)")
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type not in ("chief", "worker", "ps") or task_id is None:
        raise ValueError(f"{what}: this process's task must be chief, worker or ps with an index, got "
                         f"{task_type!r}:{task_id!r} (TF_CONFIG's \"task\")")
    return cluster_resolver.tf_config_of(spec, task_type, task_id, getattr(resolver, "rpc_layer", None))


def _join_interruptibly(native):
    """native.join() (which waits without the GIL) on a helper thread, so that Ctrl-C here stops it and is raised.
    Returns (or raises) only once the helper has left C++: a thread still inside the binding when the interpreter
    ends would be unwound through it (std::terminate). Thread.join is not used to wait, since an interrupted
    Thread.join may report a live thread as finished."""
    failure = []
    left = threading.Event()

    def join():
        try:
            native.join()
        except BaseException as e:  # noqa: BLE001 (handed to the calling thread)
            failure.append(e)
        finally:
            left.set()

    threading.Thread(target=join, name="strata-ps-join", daemon=True).start()
    try:
        while not left.wait(0.2):
            pass
    except BaseException:
        native.stop()
        while not left.wait(0.2):
            pass
        raise
    if failure:
        raise failure[0]


class ParameterServerStrategy(Strategy):
    """tf.distribute.ParameterServerStrategy: asynchronous data parallelism over a cluster of a chief, workers and ps
    tasks (C++ ps::ParameterServerStrategy). Every task makes the strategy from the same resolver; on a ps task that
    starts the task's server (then call join(), or use strata.distribute.Server). The chief, Keras's way, makes and
    compiles the model under scope(), builds it (an Input first, or model.build) and calls
    model.fit(dataset, epochs=..., steps_per_epoch=...): the steps are scheduled onto the workers, the variables live
    on the ps tasks (split by variable_partitioner), and after each epoch the chief's model holds the trained values.
    Unlike TensorFlow, a worker does not run a bare server: C++ closures cannot travel, so a worker runs the same
    program (the same model and compile under scope()) and its model.fit(its own dataset) serves the chief's steps on
    that input until the chief's fit ends, returning an empty History.
    max_staleness: None asynchronous (TensorFlow's way); 0 synchronous rounds; s: a worker runs at most s steps ahead
    of the slowest. ps_timeout_seconds bounds every call to a ps; rendezvous_timeout_seconds how long a worker waits
    for the chief's fit."""

    def __init__(self, cluster_resolver, variable_partitioner=None, max_staleness=None, ps_timeout_seconds=30.0,
                 rendezvous_timeout_seconds=60.0):
        tf_config = _tf_config_of_resolver(cluster_resolver, "ParameterServerStrategy")
        if variable_partitioner is not None and not isinstance(variable_partitioner, _Partitioners._Partitioner):
            raise TypeError("ParameterServerStrategy: variable_partitioner is one of strata.distribute.experimental."
                            "partitioners (FixedShardsPartitioner, MinSizePartitioner, MaxSizePartitioner) or None; "
                            "strata runs no Python function to split variables")
        if max_staleness is not None and max_staleness < 0:
            raise ValueError(f"ParameterServerStrategy: max_staleness must be None or >= 0, got {max_staleness}")
        if ps_timeout_seconds <= 0 or rendezvous_timeout_seconds <= 0:
            raise ValueError("ParameterServerStrategy: ps_timeout_seconds and rendezvous_timeout_seconds must be > 0")
        self.cluster_resolver = cluster_resolver
        super().__init__(_strata.ParameterServerStrategy(
            tf_config, partitioner=None if variable_partitioner is None else variable_partitioner._native,
            max_staleness=max_staleness, ps_timeout_seconds=float(ps_timeout_seconds),
            rendezvous_timeout_seconds=float(rendezvous_timeout_seconds)))

    @property
    def task_type(self):
        return self._native.task_type

    @property
    def task_id(self):
        return self._native.task_index

    @property
    def num_ps(self):
        return self._native.num_ps

    @property
    def num_workers(self):
        """The worker tasks the chief schedules steps onto."""
        return self._native.num_worker_tasks

    def join(self):
        """A ps task: serves its variables until the process is stopped (or Ctrl-C, raised as KeyboardInterrupt)."""
        _join_interruptibly(self._native)

    def worker_status(self):
        """The chief, after fit: a dict per worker task (address, up, steps_run, calls_lost)."""
        return self._native.worker_status()


class Server:
    """tf.distribute.Server for a ps task: Server(cluster_spec, job_name="ps", task_index=i, protocol="grpc") serves
    that task's variables (C++ ps::ParameterServer, through a ps task's ParameterServerStrategy); join() blocks until
    the process is stopped. Workers serve differently in strata (see ParameterServerStrategy): job_name="worker" is a
    ValueError saying how."""

    def __init__(self, server_or_cluster_def, job_name=None, task_index=None, protocol=None, config=None, start=True):
        del config
        if protocol not in (None, "grpc"):
            raise ValueError(f"Server: protocol must be 'grpc' (or None), got {protocol!r}")
        spec = cluster_resolver.ClusterSpec(server_or_cluster_def)
        if job_name == "worker":
            raise ValueError("Server: a strata worker serves the chief's training steps from its own model and input, "
                             "so it runs no bare server: on a worker task make ParameterServerStrategy(resolver), "
                             "make and compile the chief's model under its scope and call model.fit(dataset), which "
                             "serves until the chief's fit ends")
        if job_name != "ps":
            raise ValueError(f"Server: job_name must be 'ps' (a parameter server), got {job_name!r}")
        if task_index is None:
            task_index = 0
        if not 0 <= task_index < spec.num_tasks("ps"):
            raise ValueError(f"Server: the cluster has {spec.num_tasks('ps')} ps tasks, no ps task {task_index}")
        self._resolver = cluster_resolver.SimpleClusterResolver(spec, task_type="ps", task_id=task_index,
                                                                 rpc_layer=protocol)
        self._address = spec.task_address("ps", task_index)
        self._strategy = None
        if start:
            self.start()

    def start(self):
        if self._strategy is None:
            self._strategy = ParameterServerStrategy(self._resolver)

    @property
    def target(self):
        return f"grpc://{self._address}"

    def join(self):
        self.start()
        self._strategy.join()


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

    def native_kwargs(self):
        """The options as the C++ strategies' keyword arguments, the defaults filled in."""
        return {"implementation": self.implementation, "bytes_per_pack": self.bytes_per_pack or (25 << 20),
                "timeout_seconds": float(self.timeout_seconds or 300.0)}


class experimental:  # noqa: N801 (tf.distribute.experimental's names)
    CommunicationImplementation = CommunicationImplementation
    CommunicationOptions = CommunicationOptions
    CentralStorageStrategy = CentralStorageStrategy
    ParameterServerStrategy = ParameterServerStrategy
    PipelineStrategy = PipelineStrategy
    partitioners = partitioners


class MultiWorkerMirroredStrategy(_WorkerGroupMember, Strategy):
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
        super().__init__(_strata.MultiWorkerMirroredStrategy(**options.native_kwargs()))


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


__all__ = ["ReduceOp", "PerReplica", "DistributedDataset", "experimental_local_results", "Strategy",
           "OneDeviceStrategy", "MirroredStrategy", "MultiWorkerMirroredStrategy", "CommunicationOptions",
           "CommunicationImplementation", "experimental", "get_strategy", "CentralStorageStrategy",
           "ParameterServerStrategy", "PipelineStrategy", "Server", "cluster_resolver"]
