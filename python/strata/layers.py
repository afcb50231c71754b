"""strata.layers: the C++ layers under Keras's names and arguments (a layer object is the C++ layer; a model takes a
copy of it), and Input, the shape a Sequential is built for at once. Thread-safety: as the C++ layers."""

from ._strata import (GRU, LSTM, Activation, AveragePooling2D, BatchNormalization, Conv2D, Dense, Dropout,
                      Embedding, Flatten, GlobalAveragePooling2D, Layer, MaxPooling2D, Reshape, Rescaling)

MaxPool2D = MaxPooling2D
AvgPool2D = AveragePooling2D


class Input:
    """keras.Input as a Sequential's first entry: the shape of one example (no batch dimension)."""

    def __init__(self, shape, name=""):
        self.shape = tuple(int(d) for d in shape)
        self.name = name


__all__ = ["Layer", "Input", "Rescaling", "Dense", "Conv2D", "MaxPooling2D", "MaxPool2D", "AveragePooling2D",
           "AvgPool2D", "GlobalAveragePooling2D", "Flatten", "Reshape", "Activation", "Dropout",
           "BatchNormalization", "Embedding", "LSTM", "GRU"]
