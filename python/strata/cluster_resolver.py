"""strata.distribute.cluster_resolver: tf.distribute.cluster_resolver's ClusterSpec, TFConfigClusterResolver and
SimpleClusterResolver, in pure Python. A resolver says who is in the job and which task this process is; strategies
hand it to C++ as a TF_CONFIG document (tf_config_of), which cluster::resolve_tf_config checks (bad addresses,
missing tasks: ValueError naming them). Thread-safety: plain values; TFConfigClusterResolver reads TF_CONFIG on
each call, as TensorFlow's does."""

import json
import os


class ClusterSpec:
    """tf.train.ClusterSpec: job name -> the "host:port" addresses of its tasks, in task order. Takes a dict of lists
    (or of {index: address} dicts, as TensorFlow does, with indices 0..n-1) or another ClusterSpec."""

    def __init__(self, cluster):
        if isinstance(cluster, ClusterSpec):
            cluster = cluster.as_dict()
        if not isinstance(cluster, dict):
            raise TypeError(f"ClusterSpec: expected a dict of job name -> addresses, got {type(cluster).__name__}")
        self._jobs = {}
        for job, tasks in cluster.items():
            if isinstance(tasks, dict):
                if sorted(tasks) != list(range(len(tasks))):
                    raise ValueError(f"ClusterSpec: job '{job}' has task indices {sorted(tasks)}; strata needs "
                                     f"0..{len(tasks) - 1}")
                tasks = [tasks[i] for i in range(len(tasks))]
            if isinstance(tasks, str) or not all(isinstance(t, str) for t in tasks):
                raise TypeError(f"ClusterSpec: job '{job}' must list \"host:port\" strings, got {tasks!r}")
            self._jobs[str(job)] = list(tasks)

    def as_dict(self):
        return {job: list(tasks) for job, tasks in self._jobs.items()}

    @property
    def jobs(self):
        return list(self._jobs)

    def num_tasks(self, job_name):
        return len(self._jobs.get(job_name, []))

    def job_tasks(self, job_name):
        if job_name not in self._jobs:
            raise ValueError(f"ClusterSpec: no job named '{job_name}' (jobs: {self.jobs})")
        return list(self._jobs[job_name])

    def task_address(self, job_name, task_index):
        tasks = self.job_tasks(job_name)
        if not 0 <= task_index < len(tasks):
            raise ValueError(f"ClusterSpec: job '{job_name}' has {len(tasks)} tasks, no task {task_index}")
        return tasks[task_index]

    def __bool__(self):
        return bool(self._jobs)

    def __eq__(self, other):
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __repr__(self):
        return f"ClusterSpec({self._jobs!r})"


class ClusterResolver:
    """What the strategies read of a resolver: cluster_spec(), task_type, task_id and rpc_layer."""

    def cluster_spec(self):
        raise NotImplementedError

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        del task_type, task_id, config_proto
        return {}


class SimpleClusterResolver(ClusterResolver):
    """A cluster given in code: a ClusterSpec (or dict) and this process's task."""

    def __init__(self, cluster_spec, master="", task_type=None, task_id=None, environment="", rpc_layer=None):
        self._cluster_spec = ClusterSpec(cluster_spec)
        self._master = master
        self.task_type = task_type
        self.task_id = task_id
        self.environment = environment
        self.rpc_layer = rpc_layer

    def cluster_spec(self):
        return self._cluster_spec

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        del task_type, task_id, rpc_layer
        return self._master


class TFConfigClusterResolver(ClusterResolver):
    """The cluster and this task from the TF_CONFIG environment variable (what `python -m strata.launch` sets):
    {"cluster": {"chief": [...], "worker": [...], "ps": [...]}, "task": {"type": ..., "index": ...}}. task_type,
    task_id and rpc_layer given here override TF_CONFIG's, as in TensorFlow."""

    def __init__(self, task_type=None, task_id=None, rpc_layer=None, environment=None):
        self._task_type = task_type
        self._task_id = task_id
        self._rpc_layer = rpc_layer
        self._environment = environment

    @staticmethod
    def _config():
        text = os.environ.get("TF_CONFIG", "")
        if not text.strip():
            return {}
        try:
            config = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"TF_CONFIG is not JSON: {e}") from None
        if not isinstance(config, dict):
            raise ValueError(f"TF_CONFIG must be a JSON object, got {text!r}")
        return config

    @property
    def task_type(self):
        return self._task_type if self._task_type is not None else self._config().get("task", {}).get("type")

    @task_type.setter
    def task_type(self, value):
        self._task_type = value

    @property
    def task_id(self):
        if self._task_id is not None:
            return self._task_id
        index = self._config().get("task", {}).get("index")
        return None if index is None else int(index)

    @task_id.setter
    def task_id(self, value):
        self._task_id = value

    @property
    def rpc_layer(self):
        return self._rpc_layer if self._rpc_layer is not None else self._config().get("rpc_layer")

    @property
    def environment(self):
        return self._environment if self._environment is not None else self._config().get("environment", "")

    def cluster_spec(self):
        return ClusterSpec(self._config().get("cluster", {}))

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        task_type = task_type if task_type is not None else self.task_type
        task_id = task_id if task_id is not None else self.task_id
        if task_type is None or task_id is None:
            return ""
        address = self.cluster_spec().task_address(task_type, task_id)
        layer = rpc_layer or self.rpc_layer
        return f"{layer}://{address}" if layer else address


def tf_config_of(cluster_spec, task_type, task_id, rpc_layer=None):
    """The TF_CONFIG document naming `cluster_spec` and task `task_type`:`task_id` (what C++ resolves)."""
    config = {"cluster": ClusterSpec(cluster_spec).as_dict(), "task": {"type": task_type, "index": int(task_id)}}
    if rpc_layer:
        config["rpc_layer"] = rpc_layer
    return json.dumps(config)


__all__ = ["ClusterSpec", "ClusterResolver", "SimpleClusterResolver", "TFConfigClusterResolver"]
