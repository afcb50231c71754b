"""safetensors files between strata and the safetensors package (Hugging Face's Rust reader and writer, numpy).

strata's files (io::save_safetensors) are read by safetensors.safe_open / safetensors.numpy (bfloat16, which numpy
lacks, through safetensors.deserialize's raw bytes); the package's files are read by io::load_safetensors. Every
name, dtype, shape, element (bit for bit) and metadata string must agree. strata's per-tensor checksums
("crc32c:<name>" in the metadata) are checked with tests/crc32c_reference.py, the hand-written CRC-32C.
"""
import os
import sys

import numpy as np
import safetensors
import safetensors.numpy
from safetensors import safe_open

from peers_tool import ToolError, array, run, same_bits, tensor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from crc32c_reference import crc32c  # noqa: E402 (tests/crc32c_reference.py)

SAFETENSORS_DTYPE = {"float32": "F32", "int32": "I32", "int64": "I64", "uint8": "U8", "bfloat16": "BF16"}


def strata_tensors():
    """{name: numpy array} of every dtype strata saves: special floats, integer extremes, a scalar, an empty tensor."""
    rng = np.random.default_rng(9)
    return {
        "dense/kernel": rng.standard_normal((16, 8)).astype(np.float32),
        "dense/bias": np.array([0.0, -0.0, 1e-45, -3.4028235e38, np.inf, -np.inf, np.nan, 0.1], dtype=np.float32),
        "conv2d/kernel": rng.standard_normal((3, 3, 1, 4)).astype(np.float32),
        "optimizer/iterations": np.array(1234, dtype=np.int64),
        "big": np.array([2**63 - 1, -(2**63), 2**40 + 3], dtype=np.int64),
        "labels": np.array([[-(2**31), 0], [9, 2**31 - 1]], dtype=np.int32),
        "pixels": np.arange(0, 256, 17, dtype=np.uint8).reshape(4, 4),
        "nothing": np.zeros((0, 4), dtype=np.float32),
        "scalar": np.array(2.5, dtype=np.float32),
        # bfloat16 as its bits: 1.0, -2.0, +inf, a NaN, the smallest subnormal, -0.
        "mixed": np.array([0x3F80, 0xC000, 0x7F80, 0x7FC0, 0x0001, 0x8000], dtype=np.uint16),
    }


def strata_dtype(name, value):
    return "bfloat16" if name == "mixed" else value.dtype.name


def test_strata_file_read_by_the_safetensors_package(tmp_path):
    path = str(tmp_path / "strata.safetensors")
    tensors = strata_tensors()
    specs = []
    for name, value in tensors.items():
        spec = tensor(value)
        spec["dtype"] = strata_dtype(name, value)
        spec["name"] = name
        specs.append(spec)
    metadata = {"format": "pt", "step": "12", "note": "caf\u00e9"}
    run("safetensors-write", {"path": path, "tensors": specs, "metadata": metadata})

    with safe_open(path, framework="np") as f:
        assert sorted(f.keys()) == sorted(tensors)
        theirs_metadata = f.metadata()
        for name, value in tensors.items():
            if name == "mixed":
                continue  # numpy has no bfloat16
            theirs = f.get_tensor(name)
            assert theirs.dtype == value.dtype and theirs.shape == value.shape, name
            assert same_bits(theirs, value) if value.dtype == np.float32 else np.array_equal(theirs, value), name
    with open(path, "rb") as f:
        raw = dict(safetensors.deserialize(f.read()))
    for name, value in tensors.items():
        assert raw[name]["dtype"] == SAFETENSORS_DTYPE[strata_dtype(name, value)], name
        assert list(raw[name]["shape"]) == list(value.shape), name
        assert bytes(raw[name]["data"]) == value.astype(value.dtype.newbyteorder("<")).tobytes(), name

    # The caller's metadata, and one checksum per tensor that the hand-written CRC-32C agrees with.
    for key, value in metadata.items():
        assert theirs_metadata.pop(key) == value
    assert theirs_metadata == {f"crc32c:{name}": f"{crc32c(bytes(raw[name]['data'])):08x}" for name in tensors}


def test_safetensors_package_file_read_by_strata(tmp_path):
    path = str(tmp_path / "package.safetensors")
    tensors = {name: value for name, value in strata_tensors().items() if name != "mixed"}
    metadata = {"format": "np", "written_by": "safetensors.numpy"}
    safetensors.numpy.save_file(tensors, path, metadata=metadata)
    ours = run("safetensors-read", {"path": path})
    # No checksums in the package's file: strata loads it unchecked, and returns the metadata as it is.
    assert ours["metadata"] == metadata
    assert sorted(t["name"] for t in ours["tensors"]) == sorted(tensors)
    for t in ours["tensors"]:
        value = tensors[t["name"]]
        assert t["dtype"] == value.dtype.name and t["shape"] == list(value.shape), t["name"]
        assert same_bits(array(t), value) if value.dtype == np.float32 else np.array_equal(array(t), value), t["name"]

    # bfloat16 from the package's raw serializer: the bits come through as written.
    bf16_path = str(tmp_path / "bf16.safetensors")
    bf16 = strata_tensors()["mixed"]
    safetensors.serialize_file({"mixed": safetensors.TensorSpec(dtype="bfloat16", shape=list(bf16.shape),
                                                                data_ptr=bf16.ctypes.data, data_len=bf16.nbytes)},
                               bf16_path)
    (t,) = run("safetensors-read", {"path": bf16_path})["tensors"]
    assert t["dtype"] == "bfloat16" and t["shape"] == [6] and t["values"] == bf16.tolist()


def test_a_dtype_strata_does_not_hold_is_refused_by_name(tmp_path):
    path = str(tmp_path / "f64.safetensors")
    safetensors.numpy.save_file({"w": np.ones(3, dtype=np.float64)}, path)
    try:
        run("safetensors-read", {"path": path})
    except ToolError as e:
        assert "F64" in str(e) and "w" in str(e), str(e)
    else:
        raise AssertionError("strata read an F64 tensor it cannot hold")
