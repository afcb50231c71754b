# Model.fit from Python on small random data: the same weights under OneDeviceStrategy as with no strategy, and under
# MirroredStrategy with two replicas as with one (the global batch split in two); Python callbacks with dict logs;
# stop_training; a callback's exception and Ctrl-C (SIGINT while the GIL is released) stop fit and are raised; the GIL
# is free while fit computes; validation_split gives val_ logs.
# Thread-safety: one test process (one test sends itself SIGINT).
import os
import signal
import threading
import time

import numpy as np
import pytest

import strata
from strata import layers


def data(rows=256, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 8)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    return x, y


def trained_weights(strategy, epochs=2):
    strata.utils.set_random_seed(7)
    x, y = data()
    def make():
        model = strata.Sequential([layers.Input((8,)), layers.Dense(16, activation="relu"), layers.Dense(2)])
        model.compile(optimizer=strata.optimizers.SGD(learning_rate=0.1),
                      loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        return model
    if strategy is None:
        model = make()
    else:
        with strategy.scope():
            model = make()
    history = model.fit(x, y, epochs=epochs, batch_size=32, shuffle=False, verbose=0)
    return model.get_weights(), history.history


def test_one_device_strategy_trains_as_no_strategy():
    plain, plain_history = trained_weights(None)
    one_device, one_device_history = trained_weights(strata.distribute.OneDeviceStrategy())
    for a, b in zip(plain, one_device):
        np.testing.assert_array_equal(a, b)
    assert plain_history == one_device_history


def test_two_mirrored_replicas_train_as_one_device():
    one, one_history = trained_weights(strata.distribute.OneDeviceStrategy())
    two, two_history = trained_weights(strata.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    for a, b in zip(one, two):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(one_history["loss"], two_history["loss"], rtol=1e-5)
    assert one_history["accuracy"] == two_history["accuracy"]
    assert one_history["loss"][1] < one_history["loss"][0]


def small_model():
    model = strata.Sequential([layers.Dense(4, activation="relu"), layers.Dense(2)])
    model.compile(optimizer="adam", loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


class Recorder(strata.callbacks.Callback):
    def __init__(self, stop_after_batch=None):
        super().__init__()
        self.epochs, self.batches = [], 0
        self.stop_after_batch = stop_after_batch

    def on_epoch_end(self, epoch, logs):
        self.epochs.append((epoch, dict(logs)))

    def on_train_batch_end(self, batch, logs):
        self.batches += 1
        if self.stop_after_batch is not None and self.batches >= self.stop_after_batch:
            self.model.stop_training = True


def test_python_callbacks_get_each_epoch_with_its_logs_and_validation():
    x, y = data()
    recorder = Recorder()
    history = small_model().fit(x, y, epochs=3, batch_size=64, validation_split=0.25, callbacks=[recorder], verbose=0)
    assert [epoch for epoch, _ in recorder.epochs] == [0, 1, 2]
    assert sorted(recorder.epochs[0][1]) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert recorder.batches == 3 * 3  # 192 training rows in batches of 64
    assert history.history["val_loss"] == [logs["val_loss"] for _, logs in recorder.epochs]


def test_stop_training_from_a_callback_stops_after_that_step():
    x, y = data()
    recorder = Recorder(stop_after_batch=2)
    history = small_model().fit(x, y, epochs=5, batch_size=32, callbacks=[recorder], verbose=0)
    assert recorder.batches == 2
    assert len(history.history["loss"]) <= 1


class Failing(strata.callbacks.Callback):
    def on_train_batch_end(self, batch, logs):
        raise KeyError("raised in a callback")


def test_a_callbacks_exception_stops_fit_and_is_raised():
    x, y = data()
    model = small_model()
    with pytest.raises(KeyError, match="raised in a callback"):
        model.fit(x, y, epochs=5, batch_size=32, callbacks=[Failing()], verbose=0)
    assert len(model.predict(x)) == len(x)  # the model is still usable


def big_data():
    rng = np.random.default_rng(1)
    return rng.normal(size=(20000, 256)).astype(np.float32), rng.integers(0, 10, size=20000)


def wide_model():
    model = strata.Sequential([layers.Dense(512, activation="relu"), layers.Dense(512, activation="relu"),
                               layers.Dense(10)])
    model.compile(optimizer="adam", loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_ctrl_c_stops_fit_between_steps_and_raises_keyboard_interrupt():
    x, y = big_data()
    model = wide_model()
    recorder = Recorder()
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            model.fit(x, y, epochs=50, batch_size=32, callbacks=[recorder], verbose=0)
    finally:
        timer.cancel()
    assert time.perf_counter() - start < 30
    assert 0 < recorder.batches < 50 * len(x) // 32
    assert model.predict(x[:10]).shape == (10, 10)  # fit left the model usable


def test_the_gil_is_released_while_fit_computes():
    x, y = big_data()
    model = wide_model()
    worker = threading.Thread(target=lambda: model.fit(x, y, epochs=3, batch_size=64, verbose=0))
    worker.start()
    spins = 0
    while worker.is_alive():
        spins += 1
        time.sleep(0)
    # Were the GIL held while fit computes, this loop could run only when a step's callbacks hand the GIL over (two
    # or three turns per step), not many turns per step.
    steps = 3 * len(x) // 64
    print(f"{spins} turns of the loop in {steps} steps of fit")
    assert spins > 5 * steps
