"""strata.data: tf.data's Dataset over strata's C++ data::Dataset. Sources: from_tensor_slices on numpy arrays (one
array, a tuple or a dict of them), TFRecordDataset (optionally GZIP/ZLIB; parsed as tf.train.Example by
`.map(ops.parse_example(features))` in the reading stage), experimental.CsvDataset, Dataset.from_idx
(MNIST/Fashion-MNIST files), range. Transformations: map over native ops only (strata.data.ops), shuffle, batch,
prefetch, take, skip, repeat, cache, shard, unbatch. Iterating yields numpy arrays over the C++ tensors (no copy),
shaped like the input structure. model.fit / evaluate / predict take a Dataset whose elements are (x, y) batches.
Thread-safety: a Dataset is immutable (share it freely); an iterator belongs to one thread. Elements are made by the
C++ pipeline without the GIL; no Python runs per element."""

import os

import numpy as np

from ._strata import data as _native

AUTOTUNE = _native.AUTOTUNE
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2

_DTYPES = (np.float32, np.uint8, np.int32, np.int64)


def _as_array(value, what):
    array = np.asarray(value)
    if array.dtype == np.float64:
        array = array.astype(np.float32)  # numpy's default float, as Keras casts it
    elif array.dtype == np.bool_:
        array = array.astype(np.float32)
    elif array.dtype.kind in "iu" and array.dtype not in _DTYPES:
        array = array.astype(np.int64)
    if array.dtype not in _DTYPES:
        raise TypeError(f"{what}: strata holds float32, uint8, int32 or int64 arrays, got {array.dtype}")
    if array.ndim == 0:
        raise ValueError(f"{what}: from_tensor_slices slices the first dimension; got a scalar")
    return np.ascontiguousarray(array)


class Dataset:
    """tf.data.Dataset over strata::data::Dataset. `_single` says an element is one array rather than a tuple; named
    elements (from a dict, IDX, Example parsing, CSV with column names) come out as dicts."""

    def __init__(self, native, single=False, tfrecord=None):
        self._native = native
        self._single = single
        self._tfrecord = tfrecord  # (files, compression, num_parallel_reads) of an unparsed TFRecordDataset

    # ---- sources
    @staticmethod
    def from_tensor_slices(tensors):
        """Element i is row i of every array: `x`, `(x, y)`, `(x, y, w)` or `{"name": x, ...}` (names sorted, as
        tf.data orders a dict's keys)."""
        if isinstance(tensors, dict):
            if not tensors:
                raise ValueError("from_tensor_slices: an empty dict")
            names = sorted(tensors)
            arrays = [_as_array(tensors[k], f"from_tensor_slices['{k}']") for k in names]
            return Dataset(_native.Dataset.from_tensor_slices(arrays, names))
        if isinstance(tensors, (tuple, list)):
            if not tensors:
                raise ValueError("from_tensor_slices: an empty tuple")
            arrays = [_as_array(t, f"from_tensor_slices component {i}") for i, t in enumerate(tensors)]
            return Dataset(_native.Dataset.from_tensor_slices(arrays, []))
        return Dataset(_native.Dataset.from_tensor_slices([_as_array(tensors, "from_tensor_slices")], []), single=True)

    @staticmethod
    def range(*args):
        """int64 scalars as Python's range(stop) / range(start, stop[, step])."""
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (args + (1,))[:3]
        return Dataset(_native.Dataset.range(int(start), int(stop), int(step)), single=True)

    @staticmethod
    def from_idx(directory, split="train"):
        """The MNIST / Fashion-MNIST IDX files of `directory` ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]):
        elements {"image": uint8 [28, 28, 1], "label": int64 []} (strata's; Keras's load_data reads the same files)."""
        return Dataset(_native.Dataset.from_idx(os.fspath(directory), split))

    # ---- transformations
    def _derive(self, native, single=None):
        return Dataset(native, self._single if single is None else single)

    def map(self, map_func, num_parallel_calls=None, deterministic=None):
        """A native op of strata.data.ops (to_float, select, parse_example). A Python function is refused: strata
        runs no Python per element."""
        if isinstance(map_func, _ParseExample):
            if self._tfrecord is None:
                raise ValueError("map(parse_example(...)): parses the records of a TFRecordDataset, as its first "
                                 "step (strata parses while it reads)")
            files, compression, reads = self._tfrecord
            features = [feature._entry(name) for name, feature in sorted(map_func.features.items())]
            return Dataset(_native.Dataset.tfrecord_examples(files, features, compression, reads))
        if isinstance(map_func, _ToFloat):
            indices = [self._index(c) for c in map_func.components] if map_func.components else []
            calls = 1 if num_parallel_calls is None else int(num_parallel_calls)
            return self._derive(self._native.map_to_float(indices, map_func.scale, calls,
                                                          True if deterministic is None else bool(deterministic)))
        if isinstance(map_func, _Select):
            indices = [self._index(c) for c in map_func.components]
            return self._derive(self._native.map_select(indices), single=len(indices) == 1)
        raise TypeError(
            "Dataset.map: strata runs native ops only, never a Python function per element; pass one of "
            "strata.data.ops (to_float(scale, components), select(*components), parse_example(features)). For other "
            f"Python transformations apply them to the numpy arrays before from_tensor_slices; got {map_func!r}")

    def _index(self, component):
        if isinstance(component, int):
            return component
        names = self.element_names()
        if component not in names:
            raise ValueError(f"no component named '{component}'; the elements have {names}")
        return names.index(component)

    def element_names(self):
        """The names of an element's components ([] for a tuple), read from the first element."""
        element = self._native.make_iterator().next()
        return [] if element is None else list(element[1])

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True):
        return self._derive(self._native.shuffle(int(buffer_size), None if seed is None else int(seed),
                                                 bool(reshuffle_each_iteration)))

    def batch(self, batch_size, drop_remainder=False):
        return self._derive(self._native.batch(int(batch_size), bool(drop_remainder)))

    def prefetch(self, buffer_size=AUTOTUNE):
        return self._derive(self._native.prefetch(int(buffer_size)))

    def take(self, count):
        return self._derive(self._native.take(int(count)))

    def skip(self, count):
        return self._derive(self._native.skip(int(count)))

    def repeat(self, count=None):
        return self._derive(self._native.repeat(-1 if count is None else int(count)))

    def cache(self, filename=""):
        return self._derive(self._native.cache(os.fspath(filename)))

    def shard(self, num_shards, index):
        return self._derive(self._native.shard(int(num_shards), int(index)))

    def unbatch(self):
        return self._derive(self._native.unbatch())

    def cardinality(self):
        """The number of elements, or INFINITE_CARDINALITY / UNKNOWN_CARDINALITY."""
        return self._native.cardinality()

    def __len__(self):
        n = self.cardinality()
        if n < 0:
            raise TypeError("the length of this dataset is " + ("infinite" if n == -1 else "unknown"))
        return n

    def __iter__(self):
        iterator = self._native.make_iterator()
        while True:
            element = iterator.next()
            if element is None:
                return
            yield _structure(element[0], element[1], self._single)

    def as_numpy_iterator(self):
        return iter(self)


def _structure(arrays, names, single):
    if names and all(names):
        return dict(zip(names, arrays))
    if single and len(arrays) == 1:
        return arrays[0]
    return tuple(arrays)


def TFRecordDataset(filenames, compression_type=None, buffer_size=None, num_parallel_reads=None):  # noqa: N802
    """tf.data.TFRecordDataset: each element is one record's bytes (a uint8 array); `.map(ops.parse_example(...))`
    parses tf.train.Example records as they are read. compression_type: None / "" / "GZIP" / "ZLIB"."""
    del buffer_size  # the reader's buffer is strata's
    files = [os.fspath(filenames)] if isinstance(filenames, (str, os.PathLike)) else [os.fspath(f) for f in filenames]
    compression = compression_type or ""
    reads = 1 if num_parallel_reads is None else int(num_parallel_reads)
    return Dataset(_native.Dataset.tfrecord(files, compression, reads), single=True,
                   tfrecord=(files, compression, reads))


# ---- native map ops
class _ToFloat:
    def __init__(self, scale, components):
        self.scale = float(scale)
        self.components = list(components)

    def __repr__(self):
        return f"strata.data.ops.to_float(scale={self.scale}, components={self.components})"


class _Select:
    def __init__(self, components):
        if not components:
            raise ValueError("select: name at least one component")
        self.components = list(components)


class _ParseExample:
    def __init__(self, features):
        if not isinstance(features, dict) or not features:
            raise ValueError("parse_example: features is a dict from a feature's name to a strata.io feature")
        for name, feature in features.items():
            if not isinstance(feature, _Feature):
                raise TypeError(f"parse_example: feature '{name}' must be a strata.io.FixedLenFeature, "
                                f"VarLenFeature or RawBytesFeature, got {type(feature).__name__}")
        self.features = dict(features)


class ops:  # noqa: N801 (a namespace, as tf.data's transformations)
    """The native element ops Dataset.map takes."""

    @staticmethod
    def to_float(scale=1.0, components=()):
        """Components (indices or names; all when none given) to float32 times `scale` (uint8 pixels / 255)."""
        return _ToFloat(scale, components)

    @staticmethod
    def select(*components):
        """The named (or numbered) components in that order, as a tuple: {"image", "label"} -> (image, label)."""
        return _Select(components)

    @staticmethod
    def parse_example(features):
        """tf.io.parse_single_example with `features` {name: strata.io.FixedLenFeature(...), ...}, run by the reader
        of a TFRecordDataset; elements become dicts by feature name."""
        return _ParseExample(features)


# ---- tf.io's feature specs and writer (strata.io re-exports them)
def _dtype_name(dtype):
    if dtype is bytes or dtype is str or (isinstance(dtype, str) and dtype in ("string", "bytes")):
        return "bytes"
    name = np.dtype(dtype).name
    if name in ("float32", "float64"):
        return "float"
    if name == "int64":
        return "int64"
    raise TypeError(f"a tf.train.Example feature is bytes, float32 or int64, got {name}")


class _Feature:
    def __init__(self, kind, shape, decode_raw, var_len):
        self.kind, self.shape, self.decode_raw, self.var_len = kind, [int(d) for d in shape], decode_raw, var_len

    def _entry(self, name):
        return (name, self.kind, self.shape, self.decode_raw, self.var_len)


def FixedLenFeature(shape, dtype):  # noqa: N802 (tf.io's name)
    return _Feature(_dtype_name(dtype), shape, "", False)


def VarLenFeature(dtype):  # noqa: N802
    return _Feature(_dtype_name(dtype), [], "", True)


def RawBytesFeature(dtype, shape):  # noqa: N802
    """One bytes value decoded as little-endian `dtype` elements of `shape` (tf.io.decode_raw after parsing)."""
    return _Feature("bytes", shape, np.dtype(dtype).name, False)


def TFRecordWriter(path, options=None):  # noqa: N802 (tf.io's name)
    """tf.io.TFRecordWriter(path, options): options None / "" / "GZIP" / "ZLIB"; write(bytes), flush(), close(), and
    a `with` block closes it."""
    return _Writer(_native.TFRecordWriter(os.fspath(path), options or ""))


class _Writer:
    def __init__(self, native):
        self._native = native

    def write(self, record):
        self._native.write(bytes(record))

    def flush(self):
        self._native.flush()

    def close(self):
        self._native.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def serialize_example(features):
    """A serialized tf.train.Example from {name: value}: bytes -> a bytes feature; floats (a float array or list) ->
    a float list; integers -> an int64 list."""
    entries = []
    for name, value in features.items():
        if isinstance(value, (bytes, bytearray)):
            entries.append((name, "bytes", bytes(value)))
            continue
        array = np.asarray(value).reshape(-1)
        if array.dtype.kind == "f":
            entries.append((name, "float", [float(v) for v in array]))
        elif array.dtype.kind in "iub":
            entries.append((name, "int64", [int(v) for v in array]))
        else:
            raise TypeError(f"serialize_example: feature '{name}' must be bytes, floats or integers, got {array.dtype}")
    return _native.serialize_example(entries)


class experimental:  # noqa: N801 (tf.data.experimental's names)
    AUTOTUNE = AUTOTUNE

    @staticmethod
    def CsvDataset(filenames, record_defaults, compression_type=None, buffer_size=None, header=False,  # noqa: N802
                   field_delim=",", use_quote_delim=True, na_value="", select_cols=None, exclude_cols=None,
                   column_names=None):
        """tf.data.experimental.CsvDataset: one scalar per selected column. record_defaults: per column a dtype
        (np.float32, np.int32, np.int64, str: required) or a default value (0.0 float32, 0 int32, np.int64(0), "x";
        or [value] as TF writes it). column_names (strata's) makes the elements dicts."""
        del buffer_size
        files = [os.fspath(filenames)] if isinstance(filenames, (str, os.PathLike)) else [os.fspath(f)
                                                                                          for f in filenames]
        columns = [_csv_column(d, i) for i, d in enumerate(record_defaults)]
        return Dataset(_native.Dataset.csv(files, columns, header=bool(header), field_delim=field_delim,
                                           use_quote_delim=bool(use_quote_delim), na_value=na_value,
                                           select_cols=list(select_cols or []), exclude_cols=list(exclude_cols or []),
                                           names=list(column_names or []), compression=compression_type or ""))


def _csv_column(default, index):
    if isinstance(default, (list, tuple)):
        if len(default) > 1:
            raise ValueError(f"CsvDataset: record_defaults[{index}] holds {len(default)} values; one at most")
        if not default:
            raise ValueError(f"CsvDataset: record_defaults[{index}] is empty; give a dtype for a required column")
        default = default[0]
    if default is str or default is bytes:
        return ("string", None)
    if isinstance(default, str):
        return ("string", default)
    if isinstance(default, bool):
        raise TypeError(f"CsvDataset: record_defaults[{index}]: strata reads float32, int32, int64 or string columns")
    if isinstance(default, float):
        return ("float32", default)
    if isinstance(default, int):
        return ("int32", default)  # as TF makes a Python int an int32 constant
    if isinstance(default, np.generic):
        return (_csv_type(default.dtype, index), default.item())
    return (_csv_type(default, index), None)


def _csv_type(dtype, index):
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"CsvDataset: record_defaults[{index}] must be a dtype or a default value, got "
                        f"{dtype!r}") from None
    if name == "float64":
        name = "float32"
    if name not in ("float32", "int32", "int64"):
        raise TypeError(f"CsvDataset: record_defaults[{index}]: strata reads float32, int32, int64 or string "
                        f"columns, got {name}")
    return name


__all__ = ["Dataset", "TFRecordDataset", "AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "ops",
           "experimental", "FixedLenFeature", "VarLenFeature", "RawBytesFeature", "TFRecordWriter",
           "serialize_example"]
