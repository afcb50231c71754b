"""Variable partitioning by strata's ps partitioners against tf.distribute.experimental.partitioners.

The same partitioner options, shapes and dtypes give the same partitions (Fixed, MinSize and MaxSize shards), and on
variables TensorFlow's ParameterServerStrategy actually makes, the same rows per shard and the same round-robin of
shards over the ps tasks.
"""
import itertools
import json
import os
import subprocess
import sys

import tensorflow as tf

from peers_tool import run

PARTITIONERS = [
    {"kind": "fixed", "num_shards": 1},
    {"kind": "fixed", "num_shards": 2},
    {"kind": "fixed", "num_shards": 3},
    {"kind": "fixed", "num_shards": 7},
    {"kind": "fixed", "num_shards": 64},
    {"kind": "min_size", "min_shard_bytes": 4, "max_shards": 2},
    {"kind": "min_size", "min_shard_bytes": 4, "max_shards": 10},
    {"kind": "min_size", "min_shard_bytes": 1000, "max_shards": 3},
    {"kind": "min_size", "min_shard_bytes": 256 << 10, "max_shards": 1},
    {"kind": "min_size", "min_shard_bytes": 256 << 10, "max_shards": 8},
    {"kind": "min_size", "min_shard_bytes": 1 << 20, "max_shards": 1000},
    {"kind": "max_size", "max_shard_bytes": 4},
    {"kind": "max_size", "max_shard_bytes": 4, "max_shards": 2},
    {"kind": "max_size", "max_shard_bytes": 100, "max_shards": 3},
    {"kind": "max_size", "max_shard_bytes": 1024},
    {"kind": "max_size", "max_shard_bytes": 256 << 10},
    {"kind": "max_size", "max_shard_bytes": 1 << 20, "max_shards": 16},
]

# Row counts below, at and above the shard counts; byte sizes just under, at and over the size limits (for float32:
# 65536 x 1 is exactly 256 KiB, 1000 x 1 exactly 4000 bytes); rank 1 to 4; an embedding table of a million rows.
SHAPES = [[1], [2], [6, 1], [7], [10, 3], [13, 5], [65535], [65536], [65537], [1000, 1], [999, 1], [3, 4, 5],
          [2, 3, 4, 5], [1000000, 32], [4096, 7, 3], [100, 100], [25, 1000]]
DTYPES = {"float32": tf.float32, "int32": tf.int32, "int64": tf.int64, "uint8": tf.uint8, "bfloat16": tf.bfloat16}


def tf_partitioner(p):
    partitioners = tf.distribute.experimental.partitioners
    if p["kind"] == "fixed":
        return partitioners.FixedShardsPartitioner(num_shards=p["num_shards"])
    if p["kind"] == "min_size":
        return partitioners.MinSizePartitioner(min_shard_bytes=p["min_shard_bytes"], max_shards=p["max_shards"])
    return partitioners.MaxSizePartitioner(max_shard_bytes=p["max_shard_bytes"], max_shards=p.get("max_shards"))


def test_partitions_of_every_shape_and_dtype_are_tensorflows():
    cases = [{"partitioner": p, "shape": s, "dtype": d}
             for p, s, d in itertools.product(PARTITIONERS, SHAPES, DTYPES)]
    answers = run("partition", {"cases": cases})
    assert len(answers) == len(cases)
    mismatches = []
    for case, ours in zip(cases, answers):
        theirs = list(tf_partitioner(case["partitioner"])(tf.TensorShape(case["shape"]), DTYPES[case["dtype"]]))
        if ours["partitions"] != theirs:
            mismatches.append((case, ours["partitions"], theirs))
        rows = ours["shard_rows"]
        assert len(rows) == ours["partitions"][0] and sum(rows) == case["shape"][0], case
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ; (case, strata, TensorFlow): {mismatches[:5]}"
    # Every kind of partitioner split something, and left something whole.
    for kind in ("fixed", "min_size", "max_size"):
        counts = [a["partitions"][0] for c, a in zip(cases, answers) if c["partitioner"]["kind"] == kind]
        assert max(counts) > 1 and min(counts) == 1, kind


def test_shards_tensorflows_parameter_server_strategy_makes():
    num_ps = 3
    cases = [{"partitioner": p, "shape": s, "dtype": "float32", "num_ps": num_ps}
             for p, s in itertools.product(PARTITIONERS, [[13, 5], [1000, 1]])]
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, os.path.join(here, "tf_sharded_variables.py")], cwd=here, timeout=180,
                          input=json.dumps({"num_ps": num_ps, "cases": cases}), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout)
    ours = run("partition", {"cases": cases})
    assert max(len(t["shard_rows"]) for t in theirs) > num_ps
    for case, mine, tf_shards in zip(cases, ours, theirs):
        assert mine["shard_rows"] == tf_shards["shard_rows"], case
        # TensorFlow places shards round-robin from where the previous variable's left off; strata's shard_task
        # gives a variable's shards the same order from its first one.
        first = tf_shards["shard_tasks"][0]
        assert mine["shard_tasks"] == [(t - first) % num_ps for t in tf_shards["shard_tasks"]], case
