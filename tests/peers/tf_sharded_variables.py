"""The shards TensorFlow's ParameterServerStrategy makes of variables, for test_partitioners.py.

Run as a script in a process of its own (it connects TensorFlow's eager context to an in-process cluster, which
would outlast it in the test process): reads {"num_ps": N, "cases": [{"partitioner": {...}, "shape": [...]}]} on
stdin, starts one worker and N ps servers on 127.0.0.1 and a ParameterServerStrategy whose variable_partitioner
hands each variable to its case's partitioner (tf.distribute.experimental.partitioners, made as
test_partitioners.tf_partitioner makes them), creates one float32 variable per case in order, and prints
[{"shard_rows": [...], "shard_tasks": [ps index of each shard]}] as JSON.
"""
import json
import socket
import sys

import tensorflow as tf

from test_partitioners import tf_partitioner


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    request = json.load(sys.stdin)
    cluster = tf.train.ClusterSpec({"worker": [f"127.0.0.1:{free_port()}"],
                                    "ps": [f"127.0.0.1:{free_port()}" for _ in range(request["num_ps"])]})
    servers = [tf.distribute.Server(cluster, job_name=job, task_index=i, protocol="grpc", start=True)
               for job in ("worker", "ps") for i in range(cluster.num_tasks(job))]
    partitioners = iter([tf_partitioner(c["partitioner"]) for c in request["cases"]])
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc"),
        variable_partitioner=lambda shape, dtype: next(partitioners)(shape, dtype))
    answers = []
    with strategy.scope():
        for case in request["cases"]:
            v = tf.Variable(lambda shape=case["shape"]: tf.zeros(shape, tf.float32))
            shards = getattr(v, "variables", [v])  # a ShardedVariable, or one variable when not split
            answers.append({"shard_rows": [s.shape[0] for s in shards],
                            "shard_tasks": [tf.DeviceSpec.from_string(s.device).task for s in shards]})
    json.dump(answers, sys.stdout)
    del servers


if __name__ == "__main__":
    main()
