# The Keras tutorial CNN from numpy arrays under MirroredStrategy (two CPU replicas): one epoch reaches 85% test
# accuracy (PyTorch's and the CLI's reach about 87%), evaluate answers [loss, accuracy] and predict a numpy array.
# Thread-safety: one test process.
import time

import numpy as np

import strata
from strata import layers


def test_tutorial_cnn_under_mirrored_strategy_reaches_85_percent(fashion_mnist):
    (x_train, y_train), (x_test, y_test) = fashion_mnist
    x_train = (x_train.astype(np.float32) / 255.0)[..., np.newaxis]
    x_test = (x_test.astype(np.float32) / 255.0)[..., np.newaxis]

    strata.utils.set_random_seed(1)
    strategy = strata.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        model = strata.Sequential([
            layers.Conv2D(32, 3, activation="relu"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dense(64, activation="relu"),
            layers.Dense(10),
        ])
        model.compile(optimizer=strata.optimizers.Adam(learning_rate=0.001),
                      loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    start = time.perf_counter()
    history = model.fit(x_train, y_train, epochs=1, batch_size=64, verbose=0)
    seconds = time.perf_counter() - start
    print(f"one epoch from Python: {seconds:.2f} s ({len(x_train) / seconds:.0f} images/s)")

    assert sorted(history.history) == ["accuracy", "loss"]
    assert len(history.history["loss"]) == 1
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    print(f"test loss {loss:.4f} - test accuracy {accuracy:.4f}")
    assert accuracy >= 0.85
    assert 0.0 < loss < 0.5

    logits = model.predict(x_test[:100])
    assert isinstance(logits, np.ndarray)
    assert logits.shape == (100, 10) and logits.dtype == np.float32
    # The predicted classes are the ones evaluate counted as right, as often.
    assert abs(np.mean(np.argmax(model.predict(x_test), axis=1) == y_test) - accuracy) < 1e-4
