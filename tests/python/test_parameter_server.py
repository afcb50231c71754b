# ParameterServerStrategy from Python: a job of a chief, one worker and one ps, each a process of
# `python -m strata.launch --chief --workers 1 --ps 1` on 127.0.0.1 (ports the OS picks) running
# tests/python/scripts/ps_fit.py: the ps serves through strata.distribute.Server, the worker's fit serves the chief's
# steps, and the chief's fit trains. With one worker the steps run one after another, each pulling what the last
# pushed, so the chief ends with the loss and weights of a one-device fit on the worker's batches. Two workers over two
# ps tasks (each variable in two shards) train asynchronously: every worker runs steps and the loss falls. Also: a ps
# Server's join() stops on Ctrl-C, and bad clusters, partitioners and servers are Python exceptions naming what is wrong.
# Every process runs in its own session with a hard time limit and is killed on every path (test_launch.run).
# Thread-safety: one test process.
import json
import os
import socket
import sys

import numpy as np
import pytest

import strata
from strata import layers
from test_launch import SCRIPTS, json_lines, run

EPOCHS, STEPS = 2, 8


def one_device_fit():
    strata.utils.set_random_seed(7)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    model = strata.Sequential([layers.Input((8,)), layers.Dense(16, activation="relu"), layers.Dense(2)])
    model.compile(optimizer=strata.optimizers.SGD(learning_rate=0.1),
                  loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(x, y, epochs=EPOCHS, batch_size=32, shuffle=False, verbose=0)
    return history.history["loss"], model.evaluate(x, y, verbose=0)[1], model.get_weights()


def test_chief_worker_and_ps_train_as_one_device():
    status, out = run(["-m", "strata.launch", "--chief", "--workers", "1", "--ps", "1",
                       os.path.join(SCRIPTS, "ps_fit.py"), str(EPOCHS), str(STEPS)], timeout=180)
    assert status == 0, out
    tasks = json_lines(out)
    assert sorted(tasks) == ["chief:0", "worker:0"], out
    chief = tasks["chief:0"]
    assert tasks["worker:0"] == {"served": {}}  # a worker's fit serves and returns an empty History
    assert chief["workers"] == 1 and chief["ps"] == 1
    assert [w["steps_run"] for w in chief["worker_status"]] == [EPOCHS * STEPS]
    loss, accuracy, weights = one_device_fit()
    assert chief["loss"] == pytest.approx(loss, rel=1e-5)
    assert chief["accuracy"] == pytest.approx(accuracy)
    for got, want in zip(chief["weights"], weights):
        np.testing.assert_allclose(np.array(got, dtype=np.float32), want, rtol=1e-5, atol=1e-6)
    assert chief["loss"][1] < chief["loss"][0]


def test_two_workers_and_two_ps_train_asynchronously():
    status, out = run(["-m", "strata.launch", "--chief", "--workers", "2", "--ps", "2",
                       os.path.join(SCRIPTS, "ps_fit.py"), "3", str(STEPS), "2"], timeout=180)
    assert status == 0, out
    tasks = json_lines(out)
    assert sorted(tasks) == ["chief:0", "worker:0", "worker:1"], out
    chief = tasks["chief:0"]
    assert chief["workers"] == 2 and chief["ps"] == 2
    steps = [w["steps_run"] for w in chief["worker_status"]]
    assert sum(steps) == 3 * STEPS and all(s > 0 for s in steps), steps  # every worker served, each step ran once
    assert chief["loss"][0] > chief["loss"][1] > chief["loss"][2], chief["loss"]
    assert chief["accuracy"] > 0.7, chief  # one device: about 0.8 after 3 epochs; the untrained model about 0.5


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def test_a_ps_server_serves_until_ctrl_c():
    chief, worker, ps = free_ports(3)
    cluster = {"chief": [f"127.0.0.1:{chief}"], "worker": [f"127.0.0.1:{worker}"], "ps": [f"127.0.0.1:{ps}"]}
    script = ("import json, os, signal, sys, threading, strata\n"
              f"server = strata.distribute.Server({cluster!r}, job_name='ps', task_index=0, protocol='grpc')\n"
              "print(json.dumps({'target': server.target}), flush=True)\n"
              "threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
              "try:\n"
              "    server.join()\n"
              "except KeyboardInterrupt:\n"
              "    print(json.dumps({'stopped': True}), flush=True)\n")
    status, out = run(["-c", script], timeout=60)
    assert status == 0, out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert lines == [{"target": f"grpc://127.0.0.1:{ps}"}, {"stopped": True}], out


def test_bad_clusters_and_arguments_are_python_errors(monkeypatch):
    distribute = strata.distribute
    resolver = distribute.cluster_resolver
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="needs a chief, at least one worker and one ps task; it has no 'chief'"):
        distribute.ParameterServerStrategy(resolver.TFConfigClusterResolver())
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match="TF_CONFIG is not JSON"):
        resolver.TFConfigClusterResolver().cluster_spec()
    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "evaluator", "index": 0}}))
    tf_config = resolver.TFConfigClusterResolver()
    assert tf_config.cluster_spec().as_dict() == cluster and tf_config.task_type == "evaluator"
    assert resolver.TFConfigClusterResolver(task_type="ps").master() == "127.0.0.1:3"
    with pytest.raises(ValueError, match="must be chief, worker or ps"):
        distribute.ParameterServerStrategy(tf_config)
    with pytest.raises(TypeError, match="expected a cluster resolver"):
        distribute.ParameterServerStrategy(cluster)
    chief = resolver.SimpleClusterResolver(cluster, task_type="chief", task_id=0)
    with pytest.raises(TypeError, match="variable_partitioner is one of"):
        distribute.ParameterServerStrategy(chief, variable_partitioner=lambda shape, dtype: [2, 1])
    with pytest.raises(ValueError, match="max_staleness must be None or >= 0"):
        distribute.ParameterServerStrategy(chief, max_staleness=-1)
    bad_address = resolver.SimpleClusterResolver(dict(cluster, ps=["nowhere"]), task_type="chief", task_id=0)
    with pytest.raises(ValueError, match="bad address 'nowhere'"):  # C++'s InvalidArgument, from TF_CONFIG's check
        distribute.ParameterServerStrategy(bad_address)
    with pytest.raises(ValueError, match="runs no bare server: on a worker task make ParameterServerStrategy"):
        distribute.Server(cluster, job_name="worker", task_index=0)
    with pytest.raises(ValueError, match="protocol must be 'grpc'"):
        distribute.Server(cluster, job_name="ps", task_index=0, protocol="grpc+verbs")
    with pytest.raises(ValueError, match="has 1 ps tasks, no ps task 3"):
        distribute.Server(cluster, job_name="ps", task_index=3)
    with pytest.raises(ValueError, match="task indices"):
        resolver.ClusterSpec({"ps": {0: "a:1", 2: "b:1"}})
    assert strata.train.ClusterSpec({"ps": {1: "b:1", 0: "a:1"}}).as_dict() == {"ps": ["a:1", "b:1"]}
    partitioners = distribute.experimental.partitioners
    assert partitioners.FixedShardsPartitioner(3)([10, 4]) == [3, 1]
    assert partitioners.MinSizePartitioner(min_shard_bytes=16, max_shards=4)([10, 4]) == [4, 1]
    assert partitioners.MaxSizePartitioner(max_shard_bytes=48)([10, 4]) == [4, 1]
    with pytest.raises(ValueError, match="num_shards must be >= 1"):
        partitioners.FixedShardsPartitioner(0)
