"""TF_CONFIG fixtures resolved by strata and by TensorFlow's TFConfigClusterResolver and multi_worker_util.

For each fixture: the same task type and index, chief, rpc layer and cluster spec (TFConfigClusterResolver), and the
same id in the cluster and worker count (multi_worker_util, what MultiWorkerMirroredStrategy uses). Fixtures
TensorFlow's strategies reject (multi_worker_util's checks) must be refused by strata too.
"""
import contextlib
import json
import os

import pytest
import tensorflow as tf
from tensorflow.python.distribute import multi_worker_util

from peers_tool import run

FULL = {"chief": ["chief-0.example.com:2222"], "worker": ["10.0.0.1:2222", "10.0.0.2:2222", "[::1]:2223"],
        "ps": ["ps-0:2224", "ps-1:2224"], "evaluator": ["eval:2225"]}

VALID = [
    {"cluster": FULL, "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"},
    {"cluster": FULL, "task": {"type": "chief", "index": 0}},
    {"cluster": FULL, "task": {"type": "worker", "index": 2}},
    {"cluster": FULL, "task": {"type": "ps", "index": 1}, "rpc_layer": "grpc+verbs"},
    {"cluster": FULL, "task": {"type": "evaluator", "index": 0}},
    {"cluster": {"worker": ["localhost:1", "localhost:2", "localhost:3"]}, "task": {"type": "worker", "index": 0}},
    {"cluster": {"worker": ["localhost:1", "localhost:2", "localhost:3"]}, "task": {"type": "worker", "index": 2}},
    {"cluster": {"worker": ["a:1"], "ps": ["b:1"]}, "task": {"type": "ps", "index": 0}},
    # The index as TensorFlow's int() takes it too: a string, an integral float.
    {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": "1"}},
    {"cluster": {"chief": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker", "index": 0.0}},
    # Keys TensorFlow reads elsewhere or not at all.
    {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "environment": "cloud",
     "session_master": "grpc://a:1", "unknown": [1, 2]},
    # An empty job list: TensorFlow's spec keeps the job with no task, strata leaves it out; both hold no task of it.
    {"cluster": {"chief": ["a:1"], "worker": ["b:1"], "ps": []}, "task": {"type": "chief", "index": 0}},
]

# Clusters TensorFlow's strategies refuse (multi_worker_util._validate_cluster_spec), which strata refuses on reading.
INVALID = [
    {"cluster": {"chief": ["a:1", "b:1"], "worker": ["c:1"]}, "task": {"type": "worker", "index": 0}},
    {"cluster": {"worker": ["a:1"], "evaluator": ["b:1", "c:1"]}, "task": {"type": "worker", "index": 0}},
    {"cluster": {"worker": ["a:1"], "trainer": ["b:1"]}, "task": {"type": "worker", "index": 0}},
    {"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}},
    {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}},
]


@contextlib.contextmanager
def tf_config_variable(value):
    """TF_CONFIG set to `value` in this process's environment (where TFConfigClusterResolver reads it) for a while."""
    saved = os.environ.get("TF_CONFIG")
    os.environ["TF_CONFIG"] = value
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TF_CONFIG"]
        else:
            os.environ["TF_CONFIG"] = saved


def tensorflow_view(tf_config):
    """What TensorFlow makes of TF_CONFIG, by the names of strata's answer."""
    with tf_config_variable(json.dumps(tf_config)):
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        spec = resolver.cluster_spec()
        task_type, task_id = resolver.task_type, resolver.task_id
        view = {
            "task_type": task_type,
            "task_index": task_id,
            "rpc_layer": resolver.rpc_layer or "",
            "cluster": {job: spec.job_tasks(job) for job in spec.jobs if spec.num_tasks(job) > 0},
            "is_chief": multi_worker_util.is_chief(spec, task_type, task_id),
        }
        try:
            view["id_in_cluster"] = multi_worker_util.id_in_cluster(spec, task_type, task_id)
        except ValueError:  # "There is no id for task_type 'ps'"
            view["id_in_cluster"] = None
        if task_type in ("chief", "worker", "evaluator"):
            view["num_workers"] = multi_worker_util.worker_count(spec, task_type)
        return view


def tensorflow_refuses(tf_config):
    with tf_config_variable(json.dumps(tf_config)):
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        try:
            multi_worker_util._validate_cluster_spec(resolver.cluster_spec(), resolver.task_type, resolver.task_id)
        except ValueError:
            return True
    return False


def test_tf_config_fixtures_resolve_as_tensorflow_resolves_them():
    answers = run("tf-config", {"configs": [json.dumps(c) for c in VALID]})
    assert len(answers) == len(VALID)
    for config, ours in zip(VALID, answers):
        assert "error" not in ours, (config, ours)
        assert ours["source"] == "tf_config"
        theirs = tensorflow_view(config)
        assert ours["cluster_json"] == ours["cluster"]  # what strata writes into a TF_CONFIG (strata launch)
        assert {k: ours[k] for k in theirs} == theirs, config


@pytest.mark.parametrize("tf_config", ["{}", json.dumps({"cluster": {}}), json.dumps({"rpc_layer": "grpc"})])
def test_tf_config_without_a_cluster_is_one_process(tf_config):
    """TensorFlow: an empty cluster spec and no task; strata: the single process, worker 0 of 1."""
    ours = run("tf-config", {"configs": [tf_config]})[0]
    assert ours["source"] == "single" and ours["cluster"] == {} and ours["num_workers"] == 1
    with tf_config_variable(tf_config):
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        assert resolver.cluster_spec().as_dict() == {}
        assert resolver.task_type is None and resolver.task_id is None
        assert ours["rpc_layer"] == (resolver.rpc_layer or "")


def test_clusters_tensorflow_refuses_are_refused():
    answers = run("tf-config", {"configs": [json.dumps(c) for c in INVALID]})
    for config, ours in zip(INVALID, answers):
        assert tensorflow_refuses(config), config
        assert "error" in ours and "TF_CONFIG" in ours["error"], (config, ours)
    for config in VALID:
        assert not tensorflow_refuses(config), config
