# CentralStorageStrategy and PipelineStrategy from Python: fit, evaluate and predict under each equal a one-device run
# (two central-storage replicas with half the global batch each, or two pipeline stages of four micro-batches, train as
# one device on the whole batch, to float tolerance), and bad arguments are Python exceptions naming them.
# Thread-safety: one test process.
import numpy as np
import pytest

import strata
from strata import layers


def data(rows=256, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 8)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    return x, y


def train(strategy, epochs=2):
    """(weights, history, [loss, accuracy], predictions) of a small model fit under `strategy`."""
    strata.utils.set_random_seed(7)
    x, y = data()
    with strategy.scope():
        model = strata.Sequential([layers.Input((8,)), layers.Dense(16, activation="relu"), layers.Dense(2)])
        model.compile(optimizer=strata.optimizers.SGD(learning_rate=0.1),
                      loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(x, y, epochs=epochs, batch_size=32, shuffle=False, verbose=0)
    return model.get_weights(), history.history, model.evaluate(x, y, verbose=0), model.predict(x[:40])


def assert_trains_as_one_device(strategy):
    one = train(strata.distribute.OneDeviceStrategy())
    other = train(strategy)
    for a, b in zip(one[0], other[0]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(one[1]["loss"], other[1]["loss"], rtol=1e-5)
    assert one[1]["accuracy"] == other[1]["accuracy"]
    np.testing.assert_allclose(one[2], other[2], rtol=1e-5)
    np.testing.assert_allclose(one[3], other[3], rtol=1e-5, atol=1e-6)
    assert one[1]["loss"][1] < one[1]["loss"][0]


def test_central_storage_trains_as_one_device():
    strategy = strata.distribute.experimental.CentralStorageStrategy(compute_devices=["/cpu:0", "/cpu:1"],
                                                                     parameter_device="/cpu:0")
    assert strategy.num_replicas_in_sync == 2
    assert strata.distribute.CentralStorageStrategy is strata.distribute.experimental.CentralStorageStrategy
    assert_trains_as_one_device(strategy)


def test_pipeline_trains_as_one_device():
    strategy = strata.distribute.experimental.PipelineStrategy(stages=2, micro_batches=4, schedule="1f1b",
                                                               balance="parameters")
    assert_trains_as_one_device(strategy)
    assert strategy.layout == "[dense] [dense_1]"


def test_bad_strategy_arguments_are_python_errors():
    distribute = strata.distribute
    with pytest.raises(ValueError, match="parameter_device must be None or '/cpu:0'"):
        distribute.CentralStorageStrategy(parameter_device="/gpu:0")
    with pytest.raises(TypeError, match="compute_devices is a list"):
        distribute.CentralStorageStrategy("/cpu:0")
    with pytest.raises(ConnectionError, match="runs CPU replicas only"):  # C++'s Unavailable
        distribute.CentralStorageStrategy(["/gpu:0"])
    pipeline = distribute.experimental.PipelineStrategy
    with pytest.raises(ValueError, match="schedule must be one of gpipe, 1f1b, interleaved, zb-h1"):
        pipeline(schedule="2f2b")
    with pytest.raises(ValueError, match="stages must be an integer >= 1"):
        pipeline(stages=0)
    with pytest.raises(ValueError, match=r"micro_batches \(2\) must be a multiple of stages \(3\)"):  # from C++
        pipeline(stages=3, micro_batches=2, schedule="interleaved")
    with pytest.raises(ValueError, match="balance 'flops' is not time or parameters"):
        pipeline(balance="flops")
