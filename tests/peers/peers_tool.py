"""Runs peers_tool, strata's side of the compatibility tests in this folder, and converts values to and from it.

`run(subcommand, request)` sends one JSON request to `peers_tool SUBCOMMAND` (the binary named by $PEERS_TOOL, which
tests/peers/run_peers_tests.sh sets; else build/tests/peers_tool) and returns its JSON answer. The requests
(tests/peers/tool/commands.h lists the subcommands):
  tfrecord-write     {"path", "compression": "none"|"gzip"|"zlib", "records": [{"raw_hex"} | {"example": FEATURES}]}
                     -> {"records_written", "records_hex": the bytes of each record}
  tfrecord-read      {"path", "compression", "spec"?: {name: {"type", "shape", "decode_raw", "var_len", "default"}}}
                     -> {"records_hex", "examples": [FEATURES | null], "parsed"?: [{name: TENSOR}]}
  events-write       {"dir", "events": [{"step", "scalars": [[tag, float bits]]}]} -> {"path"}
  events-fit         {"log_dir", "seed", "batch_size", "x", "y", "val_x", "val_y": TENSOR, "epoch_learning_rates"}
                     -> {"train_file", "validation_file", "history", "input_wait_fraction", "batches", "learning_rates",
                         "epoch_end_steps"}
  safetensors-write  {"path", "tensors": [TENSOR + "name"], "metadata"} ; safetensors-read {"path"} -> the same
  schedule           {"cases": [{"schedule": KERAS_OBJECT, "steps"}]} -> [[float bits per step]]
  optimizer          {"cases": [{"optimizer": KERAS_OBJECT, "initial": TENSOR, "gradients": [TENSOR]}]}
                     -> [{"values": [[float bits] per step], "learning_rates", "slots", "iterations"}]
  onnx-functional    {"path", "seed", "inputs": [TENSOR per input]} -> TENSOR: strata's predictions of a functional model
                     with random weights (tests/peers/tool/onnx_export.cc), exported to path as ONNX
  tf-config          {"configs": [TF_CONFIG string]} -> [{"task_type", "task_index", "is_chief", ...} | {"error"}]
  partition          {"cases": [{"partitioner": {"kind", ...}, "shape", "dtype", "num_ps"}]}
                     -> [{"partitions", "shard_rows", "shard_tasks"}]
FEATURES is {name: {"bytes_hex": [...]} | {"float_bits": [...]} | {"int64": [...]}}; TENSOR is {"dtype", "shape",
"values"}; KERAS_OBJECT is {"class": "Adam", "config": {...}} with Keras's class and argument names. float32 values
travel as their IEEE-754 bits (NaN, the infinities and -0 survive JSON), bfloat16 as its 16 bits.
"""
import json
import os
import subprocess

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.environ.get("PEERS_TOOL") or os.path.join(_ROOT, "build", "tests", "peers_tool")


class ToolError(Exception):
    """peers_tool refused a request; the message is its stderr."""


def run(subcommand, request):
    """The JSON answer of `peers_tool SUBCOMMAND` to `request`; ToolError with its message when it fails."""
    if not os.access(TOOL, os.X_OK):
        raise FileNotFoundError(f"{TOOL} is not built (cmake --build build --target peers_tool)")
    done = subprocess.run([TOOL, subcommand], input=json.dumps(request), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise ToolError(done.stderr.strip() or f"peers_tool {subcommand} exited with status {done.returncode}")
    return json.loads(done.stdout)


def bits(values):
    """The IEEE-754 bits of float32 `values` (any shape), flattened to a list of ints."""
    return np.asarray(values, dtype=np.float32).view(np.uint32).ravel().tolist()


def floats(bit_list):
    """float32 values from their bits."""
    return np.asarray(bit_list, dtype=np.uint32).view(np.float32)


def tensor(array):
    """A numpy array as the tool's TENSOR (float32 as bits)."""
    array = np.asarray(array)
    if array.dtype == np.float32:
        values = bits(array)
    else:
        values = array.ravel().tolist()
    return {"dtype": array.dtype.name, "shape": list(array.shape), "values": values}


def array(spec):
    """The tool's TENSOR as a numpy array (bfloat16 as its uint16 bits)."""
    dtype = {"bfloat16": np.uint16}.get(spec["dtype"], spec["dtype"])
    values = np.asarray(spec["values"], dtype=np.uint32 if dtype == "float32" else dtype)
    if dtype == "float32":
        values = values.view(np.float32)
    return values.reshape(spec["shape"])


def same_bits(a, b):
    """Whether two float32 arrays hold the same bits (so NaN equals NaN and -0 differs from 0)."""
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
