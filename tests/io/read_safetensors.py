#!/usr/bin/python3
"""An independent safetensors reader (json + numpy only) to check files strata writes.

Usage: read_safetensors.py FILE [--values] [--metadata]

Prints one line per tensor, in the order of its data in the file:
    name dtype shape sum [v0 v1 ...]
shape is written without spaces ("[2,3]", "[]" for a scalar); sum is the float64 sum of the
elements (exact for integers) with 17 significant digits; --values appends every element
(%.9g, which round-trips float32). --metadata first prints "__metadata__ <json>" (checksums included).
Checks every "crc32c:<tensor>" checksum in the metadata (strata writes one per tensor: the CRC-32C of
the tensor's bytes as 8 hex digits) with the tests' own table-driven CRC-32C (tests/crc32c_reference.py).
Exits 1 with a message on stderr when the file breaks the format or a checksum, 2 when numpy is missing.
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from crc32c_reference import crc32c  # noqa: E402 (tests/crc32c_reference.py)

try:
    import numpy as np
except ImportError:
    sys.stderr.write("read_safetensors.py needs numpy for /usr/bin/python3: apt-get install python3-numpy\n")
    sys.exit(2)

DTYPES = {"F32": "<f4", "I32": "<i4", "I64": "<i8", "U8": "u1", "BF16": "<u2"}


def fail(path, message):
    sys.stderr.write("%s: %s\n" % (path, message))
    sys.exit(1)


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail(path, "shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        fail(path, "header length %d runs past the end of the file" % n)
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"), object_pairs_hook=dict)
    except ValueError as e:
        fail(path, "header is not JSON: %s" % e)
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", {})
    entries = []
    for name, info in header.items():
        if info["dtype"] not in DTYPES:
            fail(path, "tensor %r has unknown dtype %s" % (name, info["dtype"]))
        begin, end = info["data_offsets"]
        dtype = np.dtype(DTYPES[info["dtype"]])
        count = int(np.prod(info["shape"], dtype=np.int64)) if info["shape"] else 1
        if end - begin != count * dtype.itemsize or end > len(data):
            fail(path, "tensor %r: data_offsets %r do not fit shape %r" % (name, info["data_offsets"], info["shape"]))
        entries.append((begin, end, name, info))
    entries.sort(key=lambda e: e[0])  # stable: empty tensors keep their header order
    cursor = 0
    for begin, end, name, _ in entries:
        if begin != cursor:
            fail(path, "tensor %r starts at %d, expected %d (gap or overlap)" % (name, begin, cursor))
        cursor = end
    if cursor != len(data):
        fail(path, "%d bytes after the last tensor" % (len(data) - cursor))
    by_name = {name: (begin, end) for begin, end, name, _ in entries}
    for key, value in metadata.items():
        if not key.startswith("crc32c:"):
            continue
        name = key[len("crc32c:"):]
        if name not in by_name:
            fail(path, "checksum %r names no tensor" % key)
        if not isinstance(value, str) or len(value) != 8 or any(c not in "0123456789abcdefABCDEF" for c in value):
            fail(path, "checksum %r is %r, not 8 hex digits" % (key, value))
        begin, end = by_name[name]
        actual = crc32c(data[begin:end])
        if actual != int(value, 16):
            fail(path, "tensor %r is damaged: CRC-32C %08x, recorded %s" % (name, actual, value))
    tensors = []
    for begin, end, name, info in entries:
        raw = np.frombuffer(data[begin:end], dtype=np.dtype(DTYPES[info["dtype"]]))
        if info["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        tensors.append((name, info["dtype"], list(info["shape"]), raw.reshape(info["shape"])))
    return metadata, tensors


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    flags = {a for a in argv[1:] if a.startswith("--")}
    if len(args) != 1 or not flags <= {"--values", "--metadata"}:
        sys.stderr.write(__doc__)
        return 2
    metadata, tensors = read(args[0])
    out = []
    if "--metadata" in flags:
        out.append("__metadata__ " + json.dumps(metadata, sort_keys=True, separators=(",", ":")))
    for name, dtype, shape, values in tensors:
        flat = values.reshape(-1)
        if flat.dtype.kind in "iu":
            total = str(sum(flat.tolist()))  # Python integers: exact, never overflows
        else:
            total = "%.17g" % float(np.sum(flat.astype(np.float64)))
        line = "%s %s %s %s" % (name, dtype, json.dumps(shape, separators=(",", ":")), total)
        if "--values" in flags:
            fmt = "%d" if flat.dtype.kind in "iu" else "%.9g"
            line += "".join(" " + fmt % v for v in flat.tolist())
        out.append(line)
    sys.stdout.write("\n".join(out) + ("\n" if out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
