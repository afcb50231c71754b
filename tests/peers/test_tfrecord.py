"""TFRecord files and tf.train.Examples between strata and TensorFlow, in both directions.

strata's files (data::TFRecordWriter, data::Example) are read by tf.data.TFRecordDataset, tf.train.Example and
tf.io.parse_example; TensorFlow's files (tf.io.TFRecordWriter, plain, GZIP and ZLIB) are read by strata's
TFRecordDataset, Example::parse and make_example_dataset. Records must come through bit for bit.
"""
import gzip
import zlib

import numpy as np
import pytest
import tensorflow as tf

import peers_tool
from peers_tool import bits, floats, run

COMPRESSIONS = ["none", "gzip", "zlib"]
TF_COMPRESSION = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}

# Float values that must survive exactly: signed zero, the extremes, a subnormal, the infinities and NaN.
SPECIAL_FLOATS = np.array([0.0, -0.0, 1.5, -2.25, 3.4028235e38, -1.1754944e-38, 1e-45, np.inf, -np.inf, np.nan],
                          dtype=np.float32)
INT64_EDGES = [0, -1, 1, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63)]


def example_features(i):
    """Record i's features, as {name: (kind, values)}: fixed sizes, lists of varying length and empty lists."""
    rng = np.random.default_rng(i)
    return {
        "image": ("bytes", [rng.integers(0, 256, 4 * 4, dtype=np.uint8).tobytes()]),
        "label": ("int64", [i % 10]),
        "score": ("float", rng.standard_normal(3).astype(np.float32)),
        "specials": ("float", np.roll(SPECIAL_FLOATS, i)),
        "ids": ("int64", INT64_EDGES[: i % len(INT64_EDGES) + 1]),
        "tokens": ("bytes", [b"", b"\x00\xff", "caf\u00e9".encode()][: i % 4]),
        "empty": ("float", np.zeros(0, dtype=np.float32)),
    }


def tool_features(features):
    out = {}
    for name, (kind, values) in features.items():
        if kind == "bytes":
            out[name] = {"bytes_hex": [v.hex() for v in values]}
        elif kind == "float":
            out[name] = {"float_bits": bits(values)}
        else:
            out[name] = {"int64": [int(v) for v in values]}
    return out


def tf_example(features):
    feature = {}
    for name, (kind, values) in features.items():
        if kind == "bytes":
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        elif kind == "float":
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature))


def proto_features(example):
    """A tf.train.Example's features in the tool's FEATURES form (float lists as float32 bits)."""
    out = {}
    for name, f in example.features.feature.items():
        kind = f.WhichOneof("kind")
        if kind == "bytes_list":
            out[name] = {"bytes_hex": [v.hex() for v in f.bytes_list.value]}
        elif kind == "float_list":
            out[name] = {"float_bits": bits(list(f.float_list.value))}
        else:
            out[name] = {"int64": list(f.int64_list.value)}
    return out


# Raw records around the framing's edges: empty, one byte, and one larger than strata's 256 KiB read buffer.
RAW_RECORDS = [b"", b"\x00", bytes(range(256)) * 4, np.random.default_rng(7).bytes(300 * 1024), b"last"]


def tf_records(path, compression):
    return [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type=TF_COMPRESSION[compression])]


def tf_write(path, records, compression):
    with tf.io.TFRecordWriter(path, options=tf.io.TFRecordOptions(compression_type=TF_COMPRESSION[compression])) as w:
        for r in records:
            w.write(r)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_strata_examples_read_by_tf_data_and_parse_example(tmp_path, compression):
    path = str(tmp_path / "strata.tfrecord")
    features = [example_features(i) for i in range(12)]
    written = run("tfrecord-write", {"path": path, "compression": compression,
                                     "records": [{"example": tool_features(f)} for f in features]})
    assert written["records_written"] == len(features)

    records = tf_records(path, compression)
    assert [r.hex() for r in records] == written["records_hex"]
    for record, f in zip(records, features):
        # The same bytes TensorFlow's own serializer gives (map entries in key order), and the same features back.
        assert record == tf_example(f).SerializeToString(deterministic=True)
        assert proto_features(tf.train.Example.FromString(record)) == tool_features(f)

    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
        "score": tf.io.FixedLenFeature([3], tf.float32),
        "specials": tf.io.FixedLenFeature([len(SPECIAL_FLOATS)], tf.float32),
        "ids": tf.io.VarLenFeature(tf.int64),
        "tokens": tf.io.VarLenFeature(tf.string),
        "empty": tf.io.VarLenFeature(tf.float32),
    }
    parsed = tf.io.parse_example(tf.constant(records), spec)
    images = tf.io.decode_raw(parsed["image"], tf.uint8).numpy()
    for i, f in enumerate(features):
        assert images[i].tobytes() == f["image"][1][0]
        assert parsed["label"][i].numpy() == f["label"][1][0]
        assert bits(parsed["score"][i].numpy()) == bits(f["score"][1])
        assert bits(parsed["specials"][i].numpy()) == bits(f["specials"][1])
        for name in ("ids", "tokens", "empty"):
            sparse = parsed[name]
            row = sparse.values.numpy()[sparse.indices.numpy()[:, 0] == i]
            if name == "empty":
                assert row.size == 0
            else:
                assert list(row) == list(f[name][1])


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_strata_raw_records_are_the_bytes_tensorflow_writes(tmp_path, compression):
    strata_path, tf_path = str(tmp_path / "strata.tfrecord"), str(tmp_path / "tf.tfrecord")
    run("tfrecord-write", {"path": strata_path, "compression": compression,
                           "records": [{"raw_hex": r.hex()} for r in RAW_RECORDS]})
    assert tf_records(strata_path, compression) == RAW_RECORDS
    # Plain files are equal byte for byte; compressed ones hold the same bytes once inflated (the deflate streams
    # may differ with the zlib version).
    tf_write(tf_path, RAW_RECORDS, "none")
    with open(strata_path, "rb") as f:
        strata_bytes = f.read()
    with open(tf_path, "rb") as f:
        tf_bytes = f.read()
    inflate = {"none": lambda b: b, "gzip": gzip.decompress, "zlib": zlib.decompress}[compression]
    assert inflate(strata_bytes) == tf_bytes


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_tensorflow_files_read_by_strata_bit_for_bit(tmp_path, compression):
    path = str(tmp_path / "tf.tfrecord")
    examples = [tf_example(example_features(i)) for i in range(9)]
    # A feature whose kind is not set: TensorFlow's parser takes it as an empty list of any type.
    examples[3].features.feature["unset"].CopyFrom(tf.train.Feature())
    records = [e.SerializeToString() for e in examples] + RAW_RECORDS
    tf_write(path, records, compression)

    spec = {
        "image": {"type": "bytes", "shape": [4, 4, 1], "decode_raw": "uint8"},
        "label": {"type": "int64"},
        "score": {"type": "float", "shape": [3]},
        "specials": {"type": "float", "shape": [len(SPECIAL_FLOATS)]},
        "ids": {"type": "int64", "var_len": True},
        "weight": {"type": "float", "shape": [2], "default": {"float_bits": bits([0.25, -1.0])}},
    }
    # Only the Examples go through make_example_dataset (a raw record is not one).
    example_path = str(tmp_path / "tf-examples.tfrecord")
    tf_write(example_path, records[: len(examples)], compression)
    read = run("tfrecord-read", {"path": path, "compression": compression})
    parsed = run("tfrecord-read", {"path": example_path, "compression": compression, "spec": spec})["parsed"]

    assert read["records_hex"] == [r.hex() for r in records]
    for i, e in enumerate(examples):
        expected = proto_features(e)
        if i == 3:
            # strata's Example holds a typed list: the unset kind reads as an empty list.
            assert read["examples"][i].pop("unset") in ({"int64": []}, {"float_bits": []}, {"bytes_hex": []})
            del expected["unset"]
        assert read["examples"][i] == expected
    for i in range(len(examples), len(records)):
        raw = read["examples"][i]
        assert raw is None or raw == proto_features(tf.train.Example.FromString(records[i]))

    tf_spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
        "score": tf.io.FixedLenFeature([3], tf.float32),
        "specials": tf.io.FixedLenFeature([len(SPECIAL_FLOATS)], tf.float32),
        "ids": tf.io.VarLenFeature(tf.int64),
        "weight": tf.io.FixedLenFeature([2], tf.float32, default_value=[0.25, -1.0]),
    }
    theirs = tf.io.parse_example(tf.constant(records[: len(examples)]), tf_spec)
    images = tf.reshape(tf.io.decode_raw(theirs["image"], tf.uint8), [-1, 4, 4, 1]).numpy()
    ids = tf.sparse.to_dense(theirs["ids"]).numpy()
    id_counts = np.bincount(theirs["ids"].indices.numpy()[:, 0], minlength=len(examples))
    assert len(parsed) == len(examples)
    for i, ours in enumerate(parsed):
        assert sorted(ours) == sorted(spec)
        assert ours["image"]["dtype"] == "uint8" and ours["image"]["shape"] == [4, 4, 1]
        assert np.array_equal(peers_tool.array(ours["image"]), images[i])
        assert ours["label"] == {"dtype": "int64", "shape": [], "values": [int(theirs["label"][i])]}
        for name in ("score", "specials", "weight"):
            assert ours[name]["dtype"] == "float32"
            assert ours[name]["values"] == bits(theirs[name][i].numpy()), name
        assert ours["ids"]["values"] == ids[i][: id_counts[i]].tolist()
        assert floats(ours["weight"]["values"]).tolist() == [0.25, -1.0]


def test_strata_reads_a_tensorflow_gzip_file_of_many_records(tmp_path):
    """Records spanning many inflate buffers: strata's offsets and CRC checks against zlib's own stream."""
    path = str(tmp_path / "many.tfrecord.gz")
    rng = np.random.default_rng(3)
    records = [rng.bytes(int(n)) for n in rng.integers(0, 5000, 400)]
    tf_write(path, records, "gzip")
    assert run("tfrecord-read", {"path": path, "compression": "gzip"})["records_hex"] == [r.hex() for r in records]
