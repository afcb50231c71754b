#!/usr/bin/python3
"""An independent TFRecord writer for tests/data/formats/python_writer_test.cc: Python's standard library only
(no TensorFlow, nothing from strata), following TensorFlow's record format
(tensorflow/core/lib/io/record_writer.cc):

    uint64 length (little-endian) | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)

where masked_crc32c(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32) of the CRC-32C (Castagnoli) of x.

    write_tfrecord.py RECORDS OUT_PREFIX

RECORDS holds one record per line, hex-encoded (an empty line is an empty record). Writes OUT_PREFIX with:
  .tfrecord          uncompressed;
  .tfrecord.gz       through gzip.open (one member whose header names the file: FNAME set);
  .members.gz        two gzip members, the first half of the records and the rest, concatenated (what `cat a.gz
                     b.gz` makes; zcat and TensorFlow read it as one stream);
  .tfrecord.zz       through zlib.compress (TensorFlow's ZLIB compression).
"""
import gzip
import os
import struct
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))
from crc32c_reference import crc32c  # noqa: E402 (tests/crc32c_reference.py)


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(record):
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", masked_crc32c(length)) + record + struct.pack("<I", masked_crc32c(record))


def main():
    records_path, prefix = sys.argv[1], sys.argv[2]
    with open(records_path) as f:
        records = [bytes.fromhex(line.strip()) for line in f.read().split("\n")[:-1]]
    framed = [frame(r) for r in records]
    plain = b"".join(framed)
    with open(prefix + ".tfrecord", "wb") as f:
        f.write(plain)
    with gzip.open(prefix + ".tfrecord.gz", "wb") as f:
        f.write(plain)
    half = len(framed) // 2
    with open(prefix + ".members.gz", "wb") as f:
        f.write(gzip.compress(b"".join(framed[:half])) + gzip.compress(b"".join(framed[half:])))
    with open(prefix + ".tfrecord.zz", "wb") as f:
        f.write(zlib.compress(plain))


if __name__ == "__main__":
    main()
