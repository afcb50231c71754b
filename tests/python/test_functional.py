# The functional strata.Model from Python: a chain trains exactly as the same Sequential; a two-branch graph
# (Concatenate, Add) predicts what numpy computes from its weights and learns a small problem; multi-input models and
# eager calls are refused with messages; the layers bound lately (Conv1D, LayerNormalization, GlobalAveragePooling1D,
# MultiHeadAttention, the gelu activation) against numpy.
# Thread-safety: one test process.
import math

import numpy as np
import pytest

import strata
from strata import layers


def data(rows=256, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 8)).astype(np.float32)
    y = (x[:, 0] * x[:, 1] > 0).astype(np.int64)  # not linearly separable: the hidden layers matter
    return x, y


def compile_for(model):
    model.compile(optimizer=strata.optimizers.SGD(learning_rate=0.1),
                  loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def test_functional_chain_trains_as_the_same_sequential():
    x, y = data()
    strata.utils.set_random_seed(3)
    sequential = compile_for(strata.Sequential([layers.Input((8,)), layers.Dense(16, activation="relu"),
                                                layers.Dense(2)]))
    seq_history = sequential.fit(x, y, epochs=2, batch_size=32, shuffle=False, verbose=0).history

    strata.utils.set_random_seed(3)
    inputs = strata.Input(shape=(8,))
    outputs = layers.Dense(2)(layers.Dense(16, activation="relu")(inputs))
    functional = compile_for(strata.Model(inputs, outputs))
    fn_history = functional.fit(x, y, epochs=2, batch_size=32, shuffle=False, verbose=0).history

    assert fn_history == seq_history
    for a, b in zip(sequential.get_weights(), functional.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(sequential.predict(x), functional.predict(x))


def two_branch_model():
    inputs = strata.Input(shape=(8,))
    a = layers.Dense(16, activation="relu", name="a")(inputs)
    b = layers.Dense(16, activation="tanh", name="b")(inputs)
    merged = layers.Concatenate()([a, layers.Add()([a, b])])
    return strata.Model(inputs, layers.Dense(2, name="out")(merged))


def test_two_branch_graph_predicts_what_numpy_computes():
    strata.utils.set_random_seed(5)
    model = two_branch_model()
    x, _ = data(rows=10)
    a_kernel, a_bias, b_kernel, b_bias, out_kernel, out_bias = model.get_weights()
    a = np.maximum(x @ a_kernel + a_bias, 0)
    b = np.tanh(x @ b_kernel + b_bias)
    expected = np.concatenate([a, a + b], axis=1) @ out_kernel + out_bias
    np.testing.assert_allclose(model.predict(x), expected, rtol=1e-5, atol=1e-5)
    assert model.predict(x).shape == (10, 2)


def test_two_branch_graph_learns():
    strata.utils.set_random_seed(5)
    model = compile_for(two_branch_model())
    x, y = data(rows=512)
    history = model.fit(x, y, epochs=8, batch_size=32, verbose=0, seed=1).history
    assert history["loss"][-1] < 0.8 * history["loss"][0]
    loss, accuracy = model.evaluate(x, y, verbose=0)
    assert accuracy > 0.8
    assert loss == pytest.approx(history["loss"][-1], rel=0.5)


def test_multi_input_model_is_refused_by_fit():
    left, right = strata.Input(shape=(4,)), strata.Input(shape=(3,))
    model = strata.Model([left, right], layers.Dense(1)(layers.Concatenate()([left, right])))
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="one input array; this model has 2 inputs"):
        model.fit(np.zeros((4, 4), np.float32), np.zeros((4, 1), np.float32), verbose=0)


def test_layer_called_on_an_array_says_to_use_input():
    with pytest.raises(ValueError, match="strata.Input tensors"):
        layers.Dense(2)(np.zeros((2, 3), np.float32))


def test_input_shape_has_batch_none():
    inputs = strata.Input(shape=(28, 28, 1))
    assert inputs.shape == (None, 28, 28, 1)
    assert layers.Conv2D(4, 3)(inputs).shape == (None, 26, 26, 4)


def predict_one_layer(layer, x):
    inputs = strata.Input(shape=x.shape[1:])
    model = strata.Model(inputs, layer(inputs))
    return model, model.predict(x)


def test_conv1d_matches_numpy():
    strata.utils.set_random_seed(1)
    x = np.random.default_rng(2).normal(size=(3, 7, 4)).astype(np.float32)
    model, out = predict_one_layer(layers.Conv1D(5, 3, activation="relu"), x)
    kernel, bias = model.get_weights()  # [kernel_size, in, filters], as Keras
    expected = np.stack([np.einsum("bki,kio->bo", x[:, t:t + 3], kernel) for t in range(5)], axis=1) + bias
    np.testing.assert_allclose(out, np.maximum(expected, 0), rtol=1e-4, atol=1e-5)
    _, same = predict_one_layer(layers.Conv1D(5, 3, padding="same"), x)
    assert same.shape == (3, 7, 5)


def test_layer_normalization_and_global_average_pooling_1d_match_numpy():
    x = np.random.default_rng(3).normal(size=(4, 6, 5)).astype(np.float32)
    _, normed = predict_one_layer(layers.LayerNormalization(epsilon=1e-3), x)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(normed, (x - mean) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-5)
    _, pooled = predict_one_layer(layers.GlobalAveragePooling1D(), x)
    np.testing.assert_allclose(pooled, x.mean(axis=1), rtol=1e-5, atol=1e-6)


def test_gelu_activation_is_the_exact_gelu():
    x = np.linspace(-4, 4, 33, dtype=np.float32).reshape(1, -1)
    _, out = predict_one_layer(layers.Activation("gelu"), x)
    expected = np.array([[0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x[0]]], np.float32)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_self_attention_block_trains():
    strata.utils.set_random_seed(4)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(128, 6, 4)).astype(np.float32)
    y = (x[:, :, 0].sum(axis=1) > 0).astype(np.int64)
    inputs = strata.Input(shape=(6, 4))
    h = layers.Conv1D(8, 3, padding="same", activation="gelu")(inputs)
    attended = layers.MultiHeadAttention(num_heads=2, key_dim=4)(h, h)
    h = layers.LayerNormalization()(layers.Add()([h, attended]))
    outputs = layers.Dense(2)(layers.GlobalAveragePooling1D()(h))
    model = strata.Model(inputs, outputs)
    assert attended.shape == (None, 6, 8)
    model.compile(optimizer=strata.optimizers.Adam(learning_rate=0.01),
                  loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, epochs=5, batch_size=32, verbose=0, seed=0).history
    assert history["loss"][-1] < history["loss"][0]


def test_functional_model_under_mirrored_strategy_trains_as_one_device():
    x, y = data(rows=64)

    def history(strategy):
        strata.utils.set_random_seed(1)
        with strategy.scope():
            inputs = strata.Input(shape=(8,))
            a = layers.Dense(8, activation="relu")(inputs)
            b = layers.Dense(8)(inputs)
            model = compile_for(strata.Model(inputs, layers.Dense(2)(layers.Concatenate()([a, b]))))
        return model.fit(x, y, epochs=2, batch_size=16, shuffle=False, verbose=0).history

    one = history(strata.distribute.OneDeviceStrategy())
    two = history(strata.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    np.testing.assert_allclose(one["loss"], two["loss"], rtol=1e-5)
    assert one["accuracy"] == two["accuracy"]


def test_a_model_called_on_an_input_nests_with_shared_weights():
    strata.utils.set_random_seed(6)
    inner_input = strata.Input(shape=(8,))
    inner = strata.Model(inner_input, layers.Dense(3)(inner_input))
    outer_input = strata.Input(shape=(8,))
    outer = strata.Model(outer_input, inner(outer_input))
    x, _ = data(rows=5)
    np.testing.assert_allclose(outer.predict(x), inner.predict(x), rtol=1e-6)
    assert outer.count_params() == inner.count_params() == 8 * 3 + 3
