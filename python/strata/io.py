"""strata.io: tf.io's names for what strata.data reads and writes: TFRecordWriter, the tf.train.Example feature specs
parse_example takes (FixedLenFeature, VarLenFeature, and strata's RawBytesFeature for decode_raw), and
serialize_example. Thread-safety: a writer is used by one thread; the specs are values."""

from .data import FixedLenFeature, RawBytesFeature, TFRecordWriter, VarLenFeature, serialize_example

__all__ = ["TFRecordWriter", "FixedLenFeature", "VarLenFeature", "RawBytesFeature", "serialize_example"]
