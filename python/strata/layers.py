"""strata.layers: the C++ layers under Keras's names and arguments (a layer object is the C++ layer; a model takes a
copy of it), and Input, a model input: called on it, a layer returns the next node of a functional graph
(strata.Model(inputs, outputs)); as a Sequential's first entry it gives the shape the model is built for at once.
Thread-safety: as the C++ layers."""

from ._strata import (GRU, LSTM, Activation, Add, AveragePooling2D, BatchNormalization, Concatenate, Conv1D, Conv2D,
                      Dense, Dropout, Embedding, Flatten, GlobalAveragePooling1D, GlobalAveragePooling2D, Layer,
                      LayerNormalization, MaxPooling2D, MultiHeadAttention, Multiply, Reshape, Rescaling, Subtract,
                      SymbolicTensor)
from ._strata import Input as _native_input

MaxPool2D = MaxPooling2D
AvgPool2D = AveragePooling2D
GlobalAvgPool1D = GlobalAveragePooling1D
GlobalAvgPool2D = GlobalAveragePooling2D


def Input(shape, dtype="float32", name=""):  # noqa: N802 (Keras's name)
    """keras.Input: a symbolic tensor of one example's shape (no batch dimension); its .shape has None first."""
    return _native_input([int(d) for d in shape], dtype=str(dtype), name=name)


__all__ = ["Layer", "Input", "SymbolicTensor", "Rescaling", "Dense", "Conv1D", "Conv2D", "MaxPooling2D", "MaxPool2D",
           "AveragePooling2D", "AvgPool2D", "GlobalAveragePooling1D", "GlobalAvgPool1D", "GlobalAveragePooling2D",
           "GlobalAvgPool2D", "Flatten", "Reshape", "Activation", "Dropout", "BatchNormalization",
           "LayerNormalization", "Embedding", "LSTM", "GRU", "MultiHeadAttention", "Concatenate", "Add", "Subtract",
           "Multiply"]
