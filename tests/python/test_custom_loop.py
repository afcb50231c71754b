# Custom training loops from Python as TensorFlow writes them: a GradientTape loop with SGD gives fit's weights on the
# same batches; under MirroredStrategy with two CPU replicas, experimental_distribute_dataset + strategy.run(train_step)
# + strategy.reduce(SUM) give the one-replica loop's losses and weights; tape gradients of Variable arithmetic;
# reduce's MEAN and axis; errors in a replica's step and bad arguments are clear Python exceptions.
# Thread-safety: one test process (strategy.run's replicas are threads of it).
import numpy as np
import pytest

import strata
from strata import layers

ROWS, BATCH = 96, 16


def data():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(ROWS, 6)).astype(np.float32)
    y = rng.integers(0, 3, ROWS).astype(np.int64)
    return x, y


def make_model():
    strata.utils.set_random_seed(3)
    return strata.Sequential([layers.Input((6,)), layers.Dense(8, activation="relu"), layers.Dense(3)])


def test_gradient_tape_loop_equals_fit():
    x, y = data()
    fitted = make_model()
    fitted.compile(optimizer=strata.optimizers.SGD(learning_rate=0.1),
                   loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True))
    fitted.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)

    model = make_model()
    optimizer = strata.optimizers.SGD(learning_rate=0.1)
    loss_fn = strata.losses.SparseCategoricalCrossentropy(from_logits=True)
    before = [v.numpy() for v in model.trainable_variables]
    for _ in range(2):
        for images, labels in strata.data.Dataset.from_tensor_slices((x, y)).batch(BATCH):
            with strata.GradientTape() as tape:
                loss = loss_fn(labels, model(images, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    assert optimizer.iterations == 2 * ROWS // BATCH
    after = [v.numpy() for v in model.trainable_variables]
    assert any(np.abs(a - b).max() > 1e-3 for a, b in zip(after, before))
    for mine, keras in zip(after, fitted.get_weights()):
        np.testing.assert_allclose(mine, keras, rtol=1e-5, atol=1e-6)


def custom_loop(strategy, epochs=2):
    """TF's custom-training-loop tutorial's shape: per-example losses averaged over the global batch, the step run on
    every replica, the replicas' losses summed."""
    x, y = data()
    with strategy.scope():
        model = make_model()
        optimizer = strata.optimizers.SGD(learning_rate=0.1)
        loss_object = strata.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                  reduction=strata.losses.Reduction.NONE)
        accuracy = strata.metrics.SparseCategoricalAccuracy()

    def train_step(inputs):
        images, labels = inputs
        with strata.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = strata.nn.compute_average_loss(loss_object(labels, predictions), global_batch_size=BATCH)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        accuracy.update_state(labels, predictions)
        return loss

    dataset = strategy.experimental_distribute_dataset(strata.data.Dataset.from_tensor_slices((x, y)).batch(BATCH))
    losses = []
    for _ in range(epochs):
        for batch in dataset:
            assert len(batch.values) == strategy.num_replicas_in_sync
            per_replica = strategy.run(train_step, args=(batch,))
            losses.append(float(strategy.reduce(strata.distribute.ReduceOp.SUM, per_replica, axis=None)))
    return losses, [v.numpy() for v in model.trainable_variables], accuracy.result()


def test_mirrored_custom_loop_on_two_replicas_equals_one():
    one_losses, one_weights, one_accuracy = custom_loop(strata.distribute.OneDeviceStrategy())
    two_losses, two_weights, two_accuracy = custom_loop(strata.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    assert len(one_losses) == 2 * ROWS // BATCH
    assert one_losses[-1] < one_losses[0]
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5)
    for a, b in zip(one_weights, two_weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert one_accuracy == pytest.approx(two_accuracy)


def test_distributed_batches_split_the_global_batch():
    x, y = data()
    strategy = strata.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    batch = next(iter(strategy.experimental_distribute_dataset(
        strata.data.Dataset.from_tensor_slices((x, y)).batch(BATCH))))
    (x0, y0), (x1, y1) = batch.values
    np.testing.assert_array_equal(np.concatenate([x0, x1]), x[:BATCH])
    np.testing.assert_array_equal(np.concatenate([y0, y1]), y[:BATCH])
    ids = strategy.run(lambda part: len(part[1]), args=(batch,))
    assert ids.values == (BATCH // 2, BATCH // 2)


def test_tape_gradients_of_variable_arithmetic():
    w = strata.Variable(np.array([1.0, -2.0, 3.0], np.float32), name="w")
    unused = strata.Variable(np.zeros(2, np.float32))
    with strata.GradientTape() as tape:
        loss = w * w * 3.0 + 1.0 - w / 2.0
    grads = tape.gradient(loss, [w, unused])
    np.testing.assert_allclose(grads[0].numpy(), 6 * np.array([1.0, -2.0, 3.0]) - 0.5, rtol=1e-6)
    assert grads[1] is None
    np.testing.assert_allclose(np.asarray(loss), 3 * np.array([1.0, 4.0, 9.0]) + 1 - np.array([0.5, -1.0, 1.5]))
    w.assign_sub(np.ones(3, np.float32))
    np.testing.assert_array_equal(w.numpy(), [0.0, -3.0, 2.0])


def test_reduce_mean_and_axis():
    strategy = strata.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    values = strata.distribute.PerReplica([np.array([1.0, 2.0], np.float32), np.array([3.0, 6.0], np.float32)])
    np.testing.assert_allclose(strategy.reduce("MEAN", values), [2.0, 4.0])
    np.testing.assert_allclose(strategy.reduce(strata.distribute.ReduceOp.SUM, values), [4.0, 8.0])
    assert float(strategy.reduce("SUM", values, axis=0)) == 12.0


def test_errors_in_custom_loops_are_clear():
    strategy = strata.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    def failing(value):
        raise KeyError(f"replica saw {value}")

    with pytest.raises(KeyError, match="replica saw 7"):
        strategy.run(failing, args=(7,))
    with pytest.raises(RuntimeError, match="make a new strategy"):  # strata's rule: replicas may be out of step
        strategy.run(lambda: None)
    strategy = strata.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.run(lambda: None) is None
    with pytest.raises(ValueError, match="ReduceOp"):
        strategy.reduce("MAX", strata.distribute.PerReplica([1.0, 2.0]))
    with pytest.raises(ValueError, match="strata.GradientTape\\(\\) as tape"):
        strata.GradientTape().gradient(strata.Variable(np.ones(1, np.float32)), [])
    model = make_model()
    with pytest.raises(ValueError, match="strata.Variable"):
        strata.optimizers.SGD().apply_gradients([(np.ones(3, np.float32), np.ones(3, np.float32))])
    with pytest.raises(ValueError, match="reduction"):
        strata.losses.SparseCategoricalCrossentropy(reduction="mean")
    with pytest.raises(ValueError, match="model input"):
        model(np.array(["x"]))
    with pytest.raises(ValueError):
        model(np.ones((2, 5), np.float32))  # the model takes 6 features
    with pytest.raises(TypeError, match="strata.data.Dataset"):
        strategy.experimental_distribute_dataset([1, 2, 3])
