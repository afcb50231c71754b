# The Keras tutorial CNN on Fashion-MNIST under MirroredStrategy, as TensorFlow's "Distributed training with Keras"
# writes it, with only the imports changed (tensorflow -> strata) and the data read from Debian's IDX files (Keras's
# fashion_mnist.load_data() downloads the same arrays). Run: PYTHONPATH=build/python python examples/python/keras_cnn.py
# Thread-safety: a script; one thread.
import gzip
import os

import numpy as np

import strata as keras  # was: import keras
import strata as tf  # was: import tensorflow as tf
from strata import layers  # was: from keras import layers


def load_data(directory="/usr/share/datasets/fashion-mnist"):
    def read(name, header_bytes):
        with gzip.open(os.path.join(directory, name), "rb") as f:
            return np.frombuffer(f.read(), dtype=np.uint8, offset=header_bytes)
    return ((read("train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28), read("train-labels-idx1-ubyte.gz", 8)),
            (read("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28), read("t10k-labels-idx1-ubyte.gz", 8)))


(x_train, y_train), (x_test, y_test) = load_data()
x_train = (x_train / 255.0)[..., np.newaxis]
x_test = (x_test / 255.0)[..., np.newaxis]

strategy = tf.distribute.MirroredStrategy()
print(f"Number of devices: {strategy.num_replicas_in_sync}")

with strategy.scope():
    model = keras.Sequential([
        layers.Conv2D(32, 3, activation="relu"),
        layers.MaxPooling2D(),
        layers.Flatten(),
        layers.Dense(64, activation="relu"),
        layers.Dense(10),
    ])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=keras.optimizers.Adam(), metrics=["accuracy"])

model.fit(x_train, y_train, epochs=1, batch_size=64)
loss, accuracy = model.evaluate(x_test, y_test)
print(f"test loss {loss:.4f} - test accuracy {accuracy:.4f}")
print("predictions:", model.predict(x_test[:5]).argmax(axis=1), "labels:", y_test[:5])
