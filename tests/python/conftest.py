# pytest fixtures of the Python package's tests (tests/python, ctest's python_test through run_python_tests.sh): the
# Fashion-MNIST arrays read with numpy and gzip from Debian's dataset-fashion-mnist IDX files, once per session.
# Thread-safety: pytest runs the tests one at a time in one process.
import gzip
import os

import numpy as np
import pytest

FASHION_MNIST = os.environ.get("STRATA_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def read_idx(path, header_bytes):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=header_bytes)


@pytest.fixture(scope="session")
def fashion_mnist():
    """((x_train, y_train), (x_test, y_test)) as keras.datasets.fashion_mnist.load_data() gives them: uint8 images
    [n, 28, 28] and uint8 labels [n]."""
    def images(name):
        return read_idx(os.path.join(FASHION_MNIST, name), 16).reshape(-1, 28, 28)

    def labels(name):
        return read_idx(os.path.join(FASHION_MNIST, name), 8)

    return ((images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz")),
            (images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz")))
