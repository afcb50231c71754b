"""strata.datasets (also strata.keras.datasets): keras.datasets' load_data for MNIST and Fashion-MNIST, read from
local IDX files instead of downloaded ones: STRATA_FASHION_MNIST / STRATA_MNIST, else Debian's
/usr/share/datasets/{fashion-mnist,mnist}. Returns ((x_train, y_train), (x_test, y_test)) as Keras does: uint8 images
[n, 28, 28] and uint8 labels [n]. A missing file is an OSError naming it (nothing is downloaded).
Thread-safety: pure functions."""

import gzip
import os

import numpy as np


def _load(directory):
    def read(name, header_bytes):
        for candidate in (name + ".gz", name):
            path = os.path.join(directory, candidate)
            if os.path.exists(path):
                opener = gzip.open if candidate.endswith(".gz") else open
                with opener(path, "rb") as f:
                    return np.frombuffer(f.read(), dtype=np.uint8, offset=header_bytes)
        raise OSError(f"load_data: {os.path.join(directory, name)}[.gz] not found (strata reads local IDX files; "
                      "set STRATA_FASHION_MNIST or STRATA_MNIST to their folder)")
    return ((read("train-images-idx3-ubyte", 16).reshape(-1, 28, 28), read("train-labels-idx1-ubyte", 8)),
            (read("t10k-images-idx3-ubyte", 16).reshape(-1, 28, 28), read("t10k-labels-idx1-ubyte", 8)))


class fashion_mnist:  # noqa: N801 (keras.datasets.fashion_mnist)
    @staticmethod
    def load_data():
        return _load(os.environ.get("STRATA_FASHION_MNIST", "/usr/share/datasets/fashion-mnist"))


class mnist:  # noqa: N801 (keras.datasets.mnist)
    @staticmethod
    def load_data():
        return _load(os.environ.get("STRATA_MNIST", "/usr/share/datasets/mnist"))


__all__ = ["fashion_mnist", "mnist"]
