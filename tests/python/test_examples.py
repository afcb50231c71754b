# examples/python/custom_training_loop.py (TensorFlow's custom-training-loop tutorial on strata) runs as a script for
# one epoch on a tenth of Fashion-MNIST (IDX files of the first rows written to a temporary folder, read through
# strata.keras.datasets.fashion_mnist.load_data) and learns: its test accuracy is far above chance.
# Thread-safety: one test process; the example runs in a child process.
import gzip
import os
import re
import subprocess
import sys

import pytest

import strata

from conftest import FASHION_MNIST

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_idx_subset(source, target, rows_train, rows_test):
    for name, header, rows, row_bytes in (("train-images-idx3-ubyte", 16, rows_train, 784),
                                          ("train-labels-idx1-ubyte", 8, rows_train, 1),
                                          ("t10k-images-idx3-ubyte", 16, rows_test, 784),
                                          ("t10k-labels-idx1-ubyte", 8, rows_test, 1)):
        with gzip.open(os.path.join(source, name + ".gz"), "rb") as f:
            data = f.read(header + rows * row_bytes)
        with gzip.open(os.path.join(target, name + ".gz"), "wb", compresslevel=1) as f:
            f.write(data)


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST), reason="Fashion-MNIST IDX files are not installed")
def test_custom_training_loop_example_learns(tmp_path):
    write_idx_subset(FASHION_MNIST, tmp_path, 6000, 1000)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(strata.__file__)))
    env = dict(os.environ, STRATA_FASHION_MNIST=str(tmp_path),
               PYTHONPATH=os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "custom_training_loop.py"), "1"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    match = re.search(r"Epoch 1, Loss: ([0-9.]+), Accuracy: ([0-9.]+), Test Loss: ([0-9.]+), Test Accuracy: ([0-9.]+)",
                      result.stdout)
    assert match, result.stdout
    assert float(match.group(4)) > 60.0  # chance is 10%
    assert os.path.exists(tmp_path / "training_checkpoints" / "ckpt.weights.safetensors")
