"""CRC-32C (Castagnoli) in plain Python, table-driven, for the independent format checkers under tests/
(io/read_safetensors.py, data/formats/write_tfrecord.py): they check strata's files without strata's code.
Reflected, initial and final value 0xFFFFFFFF: crc32c(b"123456789") == 0xE3069283.
"""


def _table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()


def crc32c(data):
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283
