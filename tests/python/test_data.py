# strata.data from Python: Dataset.from_tensor_slices round-trips numpy arrays (values, shapes, dtypes; a tuple, a
# dict, one array), shuffle with a seed is a permutation (the same for the same seed), batch and drop_remainder
# shapes, take/skip/repeat, the native maps (to_float, select; a Python callable is refused), TFRecord files written
# by strata's writer read back (plain and GZIP, parsed as tf.train.Example), CSV and IDX sources; fit / evaluate /
# predict on a Dataset equal them on the same numpy batches; bad inputs raise ValueError / TypeError with strata's
# message. Thread-safety: one test process.
import os

import numpy as np
import pytest

import strata
from strata import layers

from conftest import FASHION_MNIST


def arrays(rows=10):
    rng = np.random.default_rng(0)
    return rng.normal(size=(rows, 3, 2)).astype(np.float32), rng.integers(0, 5, rows).astype(np.int64)


def test_from_tensor_slices_round_trips_values_shapes_and_dtypes():
    x, y = arrays()
    elements = list(strata.data.Dataset.from_tensor_slices((x, y)))
    assert len(elements) == 10
    for i, (xi, yi) in enumerate(elements):
        assert xi.shape == (3, 2) and xi.dtype == np.float32 and yi.shape == () and yi.dtype == np.int64
        np.testing.assert_array_equal(xi, x[i])
        assert yi == y[i]
    # One array: bare elements; a dict: dicts by key; uint8 and int32 keep their dtypes; float64 becomes float32.
    pixels = np.arange(24, dtype=np.uint8).reshape(4, 6)
    assert [e.dtype for e in strata.data.Dataset.from_tensor_slices(pixels)] == [np.uint8] * 4
    named = list(strata.data.Dataset.from_tensor_slices({"b": np.arange(4, dtype=np.int32), "a": pixels}))
    assert sorted(named[2]) == ["a", "b"] and named[2]["b"] == 2 and named[2]["b"].dtype == np.int32
    np.testing.assert_array_equal(named[3]["a"], pixels[3])
    assert next(iter(strata.data.Dataset.from_tensor_slices(np.ones((2, 2))))).dtype == np.float32


def test_batches_are_numpy_views_of_the_pipeline():
    x, y = arrays()
    batches = list(strata.data.Dataset.from_tensor_slices((x, y)).batch(4))
    assert [b[0].shape for b in batches] == [(4, 3, 2), (4, 3, 2), (2, 3, 2)]
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), x)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), y)
    dropped = list(strata.data.Dataset.from_tensor_slices((x, y)).batch(4, drop_remainder=True))
    assert [b[0].shape for b in dropped] == [(4, 3, 2), (4, 3, 2)]
    assert strata.data.Dataset.from_tensor_slices((x, y)).batch(4, drop_remainder=True).cardinality() == 2


def test_shuffle_with_a_seed_is_a_repeatable_permutation():
    values = np.arange(100, dtype=np.int64)
    ds = strata.data.Dataset.from_tensor_slices(values)
    first = [int(v) for v in ds.shuffle(100, seed=5)]
    again = [int(v) for v in ds.shuffle(100, seed=5)]
    other = [int(v) for v in ds.shuffle(100, seed=6)]
    assert sorted(first) == list(range(100))
    assert first == again
    assert first != list(range(100)) and first != other


def test_take_skip_repeat_prefetch_and_range():
    ds = strata.data.Dataset.range(10)
    assert [int(v) for v in ds.skip(2).take(3)] == [2, 3, 4]
    assert [int(v) for v in ds.take(3).repeat(2)] == [0, 1, 2, 0, 1, 2]
    assert [int(v) for v in ds.take(4).repeat().take(6)] == [0, 1, 2, 3, 0, 1]
    assert [int(v) for v in ds.prefetch(strata.data.AUTOTUNE)] == list(range(10))
    assert ds.repeat().cardinality() == strata.data.INFINITE_CARDINALITY
    assert len(ds.batch(3)) == 4


def test_native_maps_and_a_python_function_is_refused():
    pixels = np.full((4, 2, 2), 51, dtype=np.uint8)
    labels = np.arange(4, dtype=np.int64)
    ds = strata.data.Dataset.from_tensor_slices({"image": pixels, "label": labels})
    scaled = next(iter(ds.map(strata.data.ops.to_float(1 / 255.0, components=["image"]))))
    assert scaled["image"].dtype == np.float32 and scaled["label"].dtype == np.int64
    np.testing.assert_allclose(scaled["image"], 0.2, rtol=1e-6)
    x, y = next(iter(ds.map(strata.data.ops.select("image", "label")).batch(4)))
    assert x.shape == (4, 2, 2) and x.dtype == np.uint8
    np.testing.assert_array_equal(y, labels)
    with pytest.raises(TypeError, match="native ops only"):
        ds.map(lambda e: e)
    with pytest.raises(ValueError, match="no component named 'pixels'"):
        ds.map(strata.data.ops.select("pixels"))


def write_examples(path, compression, images, labels):
    with strata.io.TFRecordWriter(str(path), compression) as writer:
        for image, label in zip(images, labels):
            writer.write(strata.io.serialize_example({"image": image.tobytes(), "label": [int(label)],
                                                      "weight": [float(label) / 2]}))


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_tfrecord_written_by_strata_reads_back(tmp_path, compression):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, size=(7, 4, 4, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, size=7)
    path = tmp_path / "part.tfrecord"
    write_examples(path, compression, images, labels)
    raw = list(strata.data.TFRecordDataset([str(path)], compression_type=compression))
    assert len(raw) == 7 and raw[0].dtype == np.uint8  # the serialized records
    features = {"image": strata.io.RawBytesFeature(np.uint8, [4, 4, 1]),
                "label": strata.io.FixedLenFeature([], np.int64),
                "weight": strata.io.FixedLenFeature([], np.float32)}
    ds = strata.data.TFRecordDataset(str(path), compression_type=compression).map(
        strata.data.ops.parse_example(features))
    parsed = list(ds)
    for i, element in enumerate(parsed):
        np.testing.assert_array_equal(element["image"], images[i])
        assert element["label"] == labels[i] and element["label"].dtype == np.int64
        assert element["weight"] == np.float32(labels[i] / 2)
    batch = next(iter(ds.map(strata.data.ops.select("image", "label")).batch(5)))
    assert batch[0].shape == (5, 4, 4, 1)
    with pytest.raises(ValueError, match="TFRecordDataset"):
        ds.map(strata.data.ops.parse_example(features))


def test_a_gzip_file_read_without_its_compression_is_a_clear_error(tmp_path):
    path = tmp_path / "gz.tfrecord"
    write_examples(path, "GZIP", np.zeros((2, 4, 4, 1), np.uint8), [1, 2])
    with pytest.raises(RuntimeError, match="gz.tfrecord"):
        list(strata.data.TFRecordDataset(str(path)))


def test_csv_dataset(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("x,label,note\n1.5,3,a\n,4,\n2.5,5,c\n")
    ds = strata.data.experimental.CsvDataset(str(path), [[0.25], np.int64, ["none"]], header=True)
    rows = list(ds)
    assert rows[1][0] == np.float32(0.25) and rows[1][1] == 4 and rows[1][1].dtype == np.int64
    assert bytes(rows[1][2]) == b"none" and bytes(rows[0][2]) == b"a"
    typed = next(iter(strata.data.experimental.CsvDataset(str(path), [np.float32, 0, str], header=True)))
    assert typed[1].dtype == np.int32 and typed[0].dtype == np.float32  # a Python int default: int32, as in TF
    with pytest.raises(ValueError, match="line 3 of .*rows.csv is required"):
        list(strata.data.experimental.CsvDataset(str(path), [np.float32, np.int64, str], header=True))


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST), reason="Fashion-MNIST IDX files are not installed")
def test_idx_source():
    ds = strata.data.Dataset.from_idx(FASHION_MNIST, "test")
    assert len(ds) == 10000
    first = next(iter(ds.map(strata.data.ops.to_float(1 / 255.0, ["image"])).batch(8)))
    assert first["image"].shape == (8, 28, 28, 1) and first["image"].dtype == np.float32
    assert first["label"].dtype == np.int64


def make_model(seed=11):
    strata.utils.set_random_seed(seed)
    model = strata.Sequential([layers.Input((6,)), layers.Dense(8, activation="relu"), layers.Dense(3)])
    model.compile(optimizer=strata.optimizers.SGD(learning_rate=0.1),
                  loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def test_fit_evaluate_predict_on_a_dataset_equal_numpy():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(96, 6)).astype(np.float32)
    y = rng.integers(0, 3, 96).astype(np.int64)
    from_numpy = make_model()
    numpy_history = from_numpy.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0,
                                   validation_data=(x[:32], y[:32])).history
    from_dataset = make_model()
    train = strata.data.Dataset.from_tensor_slices((x, y)).batch(16).prefetch(strata.data.AUTOTUNE)
    validation = strata.data.Dataset.from_tensor_slices((x[:32], y[:32])).batch(16)
    dataset_history = from_dataset.fit(train, epochs=2, verbose=0, validation_data=validation).history
    assert sorted(dataset_history) == sorted(numpy_history)
    for key in numpy_history:
        np.testing.assert_allclose(dataset_history[key], numpy_history[key], rtol=1e-6)
    for a, b in zip(from_numpy.get_weights(), from_dataset.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(from_dataset.evaluate(train), from_numpy.evaluate(x, y, batch_size=16), rtol=1e-6)
    # batches of 10 rows, not 32: oneDNN's AVX2 products may round a sum otherwise, by an ulp
    np.testing.assert_allclose(from_dataset.predict(strata.data.Dataset.from_tensor_slices(x).batch(10)),
                               from_numpy.predict(x), rtol=1e-6, atol=1e-6)


def test_bad_inputs_raise_clear_python_errors():
    x, y = arrays()
    with pytest.raises(ValueError, match="same first dimension"):
        strata.data.Dataset.from_tensor_slices((x, y[:5]))
    with pytest.raises(TypeError, match="float32, uint8, int32 or int64"):
        strata.data.Dataset.from_tensor_slices(np.array(["a", "b"]))
    ds = strata.data.Dataset.from_tensor_slices((x, y))
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        ds.batch(0)
    with pytest.raises(ValueError, match="buffer_size must be at least 1"):
        ds.shuffle(0)
    with pytest.raises(OSError, match="missing.tfrecord"):
        list(strata.data.TFRecordDataset(["/nonexistent/missing.tfrecord"]))
    with pytest.raises(ValueError, match="compression"):
        strata.data.TFRecordDataset(["x"], compression_type="BZIP2")
    with pytest.raises(ValueError, match="y must be None"):
        make_model().fit(ds.batch(2), y, verbose=0)
