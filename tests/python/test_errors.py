# strata's errors as Python exceptions with strata's message: InvalidArgument -> ValueError, IoError -> OSError,
# Unavailable -> ConnectionError, DataCorrupt -> RuntimeError; each raised by the C++ core, not by the Python layer.
# Thread-safety: one test process.
import numpy as np
import pytest

import strata
from strata import layers


def built_model():
    model = strata.Sequential([layers.Input((3,)), layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_an_unknown_activation_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="unknown activation 'relux'"):
        layers.Dense(3, activation="relux")


def test_an_unknown_optimizer_is_a_value_error():
    with pytest.raises(ValueError, match="adamx"):
        strata.optimizers.get("adamx")


def test_rows_that_differ_are_a_value_error():
    with pytest.raises(ValueError, match="same number of rows"):
        built_model().fit(np.zeros((4, 3), np.float32), np.zeros((5, 2), np.float32), verbose=0)


def test_a_shape_the_model_cannot_take_is_a_value_error():
    with pytest.raises(ValueError, match=r"\[src/"):  # the C++ check's location ends strata's message
        built_model().predict(np.zeros((4, 5), np.float32))


def test_a_missing_file_is_an_os_error():
    with pytest.raises(OSError, match="/nonexistent/weights.safetensors"):
        built_model().load_weights("/nonexistent/weights.safetensors")


def test_a_corrupt_file_is_a_runtime_error(tmp_path):
    path = tmp_path / "garbage.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(RuntimeError, match="not valid JSON"):
        built_model().load_weights(str(path))


def test_a_gpu_in_a_cpu_build_is_a_connection_error():
    with pytest.raises(ConnectionError, match="CUDA"):
        strata.distribute.OneDeviceStrategy("/gpu:0")


def test_an_unsupported_dtype_is_a_value_error():
    with pytest.raises(ValueError, match="float16"):
        built_model().predict(np.zeros((4, 3), np.float16))
