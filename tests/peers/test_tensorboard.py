"""strata's TensorBoard event files, read by TensorBoard's own loaders: every scalar tag, step and value.

Two loaders: the classic EventAccumulator (Scalars) and the plugin EventAccumulator the TensorBoard server runs, which
migrates each simple_value into the scalars plugin's tensors (what the Scalars dashboard shows). The files come from
io's EventFileWriter directly, and from the TensorBoard callback during a Model::fit, whose run is compared with what
Keras's own TensorBoard callback writes for the same model, data and learning rates.
"""
import os
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator

from peers_tool import bits, floats, run, tensor

# Scalars of one file: tags with a slash, a space and non-ASCII letters; steps from 0 to beyond 2**32; values with
# signed zeros, a subnormal, the float extremes, the infinities and NaN. Steps never go back (TensorBoard drops
# events "orphaned" by a restart only when a SessionLog says so, but keep the file plain).
SPECIALS = [0.0, -0.0, 1e-45, 3.4028235e38, -3.4028235e38, float("inf"), float("-inf"), float("nan")]
TAGS = ["loss", "accuracy", "train/learning_rate", "with space", "\u03bb/\u00e9t\u00e9"]


def scalar_events():
    rng = np.random.default_rng(11)
    steps = [0, 1, 2, 5, 100, 2**32 + 7, 2**40]
    events = []
    for k, step in enumerate(steps):
        tags = TAGS[: 1 + k % len(TAGS)]
        values = rng.standard_normal(len(tags)).astype(np.float32)
        if k < len(SPECIALS):
            values[0] = SPECIALS[k]
        events.append({"step": step, "scalars": [[t, b] for t, b in zip(tags, bits(values))]})
    events.append({"step": 2**40 + 1, "scalars": [[t, bits([SPECIALS[i % len(SPECIALS)]])[0]] for i, t in
                                                   enumerate(TAGS)]})
    return events


def expected_scalars(events):
    """{tag: [(step, float32 bits)]} in file order."""
    out = {}
    for e in events:
        for tag, b in e["scalars"]:
            out.setdefault(tag, []).append((e["step"], b))
    return out


def classic_scalars(path):
    acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return acc, {tag: [(s.step, bits([s.value])[0]) for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def plugin_scalars(path):
    """What the TensorBoard server's loader makes of the file: scalars-plugin tensors of rank 0."""
    acc = plugin_event_accumulator.EventAccumulator(path, size_guidance={plugin_event_accumulator.TENSORS: 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()["tensors"]:
        assert acc.SummaryMetadata(tag).plugin_data.plugin_name == "scalars", tag
        values = []
        for e in acc.Tensors(tag):
            value = tf.make_ndarray(e.tensor_proto)
            assert value.shape == () and value.dtype == np.float32, tag
            values.append((e.step, bits([value])[0]))
        out[tag] = values
    return out


def test_event_file_read_by_tensorboard(tmp_path):
    events = scalar_events()
    started = time.time()
    path = run("events-write", {"dir": str(tmp_path), "events": events})["path"]
    ended = time.time()
    assert os.listdir(tmp_path) == [os.path.basename(path)]
    assert os.path.basename(path).startswith("events.out.tfevents.")
    expected = expected_scalars(events)

    acc, scalars = classic_scalars(str(tmp_path))
    assert acc.file_version == 2.0  # "brain.Event:2", which TensorBoard requires
    assert scalars == expected
    assert plugin_scalars(str(tmp_path)) == expected

    # Every record is a tensorflow.Event by TensorFlow's own proto, timestamped in order within the run.
    records = [tf.compat.v1.Event.FromString(r.numpy()) for r in tf.data.TFRecordDataset(path)]
    assert records[0].file_version == "brain.Event:2"
    assert [r.step for r in records[1:]] == [e["step"] for e in events]
    times = [r.wall_time for r in records]
    assert times == sorted(times) and started - 1 <= times[0] and times[-1] <= ended + 1


def test_fit_tensorboard_run_has_every_scalar_and_keras_tags(tmp_path):
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((32, 3)).astype(np.float32), rng.standard_normal((32, 1)).astype(np.float32)
    val_x, val_y = rng.standard_normal((16, 3)).astype(np.float32), rng.standard_normal((16, 1)).astype(np.float32)
    rates = [0.05, 0.1, 0.15]
    fit = run("events-fit", {"log_dir": str(tmp_path / "strata"), "seed": 3, "batch_size": 8, "x": tensor(x),
                             "y": tensor(y), "val_x": tensor(val_x), "val_y": tensor(val_y),
                             "epoch_learning_rates": rates})
    epochs = range(len(rates))
    f32 = lambda v: bits([v])[0]  # noqa: E731 (a double as the float32 TensorBoard keeps)

    # train/: epoch_<log> at each epoch, batch_<log> at each global step, the learning rate, strata's input wait.
    expected = {}
    for name, values in fit["history"].items():
        if not name.startswith("val_"):
            expected["epoch_" + name] = [(e, f32(values[e])) for e in epochs]
    for batch in fit["batches"]:
        for name, value in batch["logs"].items():
            expected.setdefault("batch_" + name, []).append((batch["step"], f32(value)))
    assert [b["step"] for b in fit["batches"]] == list(range(1, 13))
    assert fit["learning_rates"] == bits(rates)
    expected["epoch_learning_rate"] = list(zip(epochs, bits(rates)))
    expected["epoch_input_wait_percent"] = [(e, f32(100 * w)) for e, w in zip(epochs, fit["input_wait_fraction"])]
    train_dir = str(tmp_path / "strata" / "train")
    _, train = classic_scalars(train_dir)
    assert plugin_scalars(train_dir) == train
    # Examples per second are timed: TensorBoard must hold one finite, positive rate per epoch.
    rate = train.pop("epoch_examples_per_second")
    assert [s for s, _ in rate] == list(epochs)
    assert all(np.isfinite(v) and v > 0 for v in floats([b for _, b in rate]))
    assert train == expected

    # validation/: the val_ logs under their own names at each epoch, and against the global step at its end.
    expected = {}
    assert fit["epoch_end_steps"] == [4, 8, 12]
    for name, values in fit["history"].items():
        if name.startswith("val_"):
            expected["epoch_" + name[4:]] = [(e, f32(values[e])) for e in epochs]
            expected[f"evaluation_{name[4:]}_vs_iterations"] = [(fit["epoch_end_steps"][e], f32(values[e]))
                                                                for e in epochs]
    validation_dir = str(tmp_path / "strata" / "validation")
    _, validation = classic_scalars(validation_dir)
    assert plugin_scalars(validation_dir) == validation
    assert validation == expected

    # Keras's callback on the same fit: strata's runs hold every scalar tag Keras writes, at the same steps.
    keras_dir = str(tmp_path / "keras")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer=keras.optimizers.SGD(0.01), metrics=["mse"])
    model.fit(x, y, batch_size=8, epochs=len(rates), validation_data=(val_x, val_y), shuffle=False, verbose=0,
              callbacks=[keras.callbacks.LearningRateScheduler(lambda epoch, lr: rates[epoch]),
                         keras.callbacks.TensorBoard(keras_dir, update_freq=1, write_graph=False)])
    for run_name, ours in (("train", train), ("validation", validation)):
        theirs = plugin_scalars(os.path.join(keras_dir, run_name))
        assert theirs, run_name
        for tag, values in theirs.items():
            assert tag in ours, f"{run_name}/{tag}: Keras writes it, strata does not"
            assert [s for s, _ in ours[tag]] == [s for s, _ in values], f"{run_name}/{tag}"
    train_keras = plugin_scalars(os.path.join(keras_dir, "train"))
    assert train_keras["epoch_learning_rate"] == train["epoch_learning_rate"]


@pytest.fixture(autouse=True)
def _keras_seed():
    keras.utils.set_random_seed(1)
