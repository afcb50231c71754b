"""Learning-rate schedules and optimizer steps against Keras 3's, to float32 tolerance.

Each schedule and optimizer is described once, by Keras's class and argument names, and made by Keras and by strata
(peers_tool turns the description into strata's schedule, or into an OptimizerConfig for the optimizer registry).
The optimizers apply the same fixed gradients to the same variable for a few steps: after every step the variable,
the step's learning rate, and at the end every slot and the iteration count must agree.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from peers_tool import bits, floats, run, tensor

# float32 arithmetic done in another order (Keras's TensorFlow ops, strata's loops; pow and cos in double or float)
# agrees to a few units in the last place.
RTOL, ATOL = 2e-6, 1e-7

SCHEDULES = [
    {"class": "PiecewiseConstantDecay", "config": {"boundaries": [3, 7, 20], "values": [1.0, 0.5, 0.1, 0.01]}},
    {"class": "ExponentialDecay",
     "config": {"initial_learning_rate": 0.1, "decay_steps": 4, "decay_rate": 0.5, "staircase": False}},
    {"class": "ExponentialDecay",
     "config": {"initial_learning_rate": 0.1, "decay_steps": 4, "decay_rate": 0.5, "staircase": True}},
    {"class": "InverseTimeDecay",
     "config": {"initial_learning_rate": 0.1, "decay_steps": 3, "decay_rate": 0.5, "staircase": False}},
    {"class": "InverseTimeDecay",
     "config": {"initial_learning_rate": 0.1, "decay_steps": 3, "decay_rate": 0.5, "staircase": True}},
    {"class": "PolynomialDecay",
     "config": {"initial_learning_rate": 0.1, "decay_steps": 10, "end_learning_rate": 0.001, "power": 1.0}},
    {"class": "PolynomialDecay",
     "config": {"initial_learning_rate": 0.1, "decay_steps": 10, "end_learning_rate": 0.001, "power": 2.0}},
    {"class": "PolynomialDecay",
     "config": {"initial_learning_rate": 0.1, "decay_steps": 10, "end_learning_rate": 0.0, "power": 0.5}},
    {"class": "CosineDecay", "config": {"initial_learning_rate": 0.1, "decay_steps": 10, "alpha": 0.0}},
    {"class": "CosineDecay", "config": {"initial_learning_rate": 0.1, "decay_steps": 10, "alpha": 0.1}},
    {"class": "CosineDecay", "config": {"initial_learning_rate": 0.0, "decay_steps": 10, "alpha": 0.1,
                                        "warmup_target": 0.1, "warmup_steps": 5}},
    {"class": "CosineDecay", "config": {"initial_learning_rate": 0.01, "decay_steps": 7, "alpha": 0.0,
                                        "warmup_target": 0.2, "warmup_steps": 3}},
]
STEPS = list(range(0, 26)) + [100, 1000, 123456]


def keras_schedule(description):
    return getattr(keras.optimizers.schedules, description["class"])(**description["config"])


def keras_optimizer(description):
    config = dict(description["config"])
    if isinstance(config["learning_rate"], dict):
        config["learning_rate"] = keras_schedule(config["learning_rate"])
    return getattr(keras.optimizers, description["class"])(**config)


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s["class"])
def test_schedules_agree_with_keras(schedule):
    (ours,) = run("schedule", {"cases": [{"schedule": schedule, "steps": STEPS}]})
    theirs = keras_schedule(schedule)
    expected = np.array([float(theirs(step)) for step in STEPS], dtype=np.float32)
    np.testing.assert_allclose(floats(ours), expected, rtol=RTOL, atol=ATOL, err_msg=str(schedule))


OPTIMIZERS = [
    {"class": "SGD", "config": {"learning_rate": 0.1, "momentum": 0.9}},
    {"class": "SGD", "config": {"learning_rate": 0.05, "momentum": 0.5, "nesterov": True}},
    {"class": "SGD", "config": {"learning_rate": SCHEDULES[0], "momentum": 0.9}},
    {"class": "Adam", "config": {"learning_rate": 0.01}},
    {"class": "Adam", "config": {"learning_rate": SCHEDULES[1], "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-6,
                                 "amsgrad": True}},
    {"class": "Adagrad", "config": {"learning_rate": 0.1}},
    {"class": "Adagrad", "config": {"learning_rate": SCHEDULES[-1], "initial_accumulator_value": 0.5,
                                    "epsilon": 1e-5}},
]
# Keras's slot variables by strata's slot names.
KERAS_SLOTS = {"momentum": "momentums", "m": "_momentums", "v": "_velocities", "vhat": "_velocity_hats",
               "accumulator": "_accumulators"}


def gradients(steps, shape):
    """Fixed gradients: normal ones, a large one, and a zero one (where Adagrad's and Adam's state decide)."""
    rng = np.random.default_rng(17)
    out = [rng.standard_normal(shape).astype(np.float32) for _ in range(steps)]
    out[2] *= 50
    out[5][:] = 0
    return out


@pytest.mark.parametrize("optimizer", OPTIMIZERS, ids=lambda o: f"{o['class']}-{sorted(o['config'])}")
def test_optimizer_steps_agree_with_keras(optimizer):
    shape, steps = (3, 4), 10
    initial = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    grads = gradients(steps, shape)
    (ours,) = run("optimizer", {"cases": [{"optimizer": optimizer, "initial": tensor(initial),
                                           "gradients": [tensor(g) for g in grads]}]})

    theirs = keras_optimizer(optimizer)
    variable = keras.Variable(initial)
    for step, g in enumerate(grads):
        rate = np.float32(theirs.learning_rate)
        np.testing.assert_allclose(floats([ours["learning_rates"][step]]), [rate], rtol=RTOL, atol=ATOL,
                                   err_msg=f"{optimizer}: learning rate of step {step}")
        theirs.apply_gradients([(tf.constant(g), variable)])
        np.testing.assert_allclose(floats(ours["values"][step]).reshape(shape), variable.numpy(), rtol=RTOL,
                                   atol=ATOL, err_msg=f"{optimizer}: the variable after step {step}")
    assert ours["iterations"] == int(theirs.iterations) == steps
    assert ours["slots"], optimizer
    for name, values in ours["slots"].items():
        (keras_slot,) = getattr(theirs, KERAS_SLOTS[name])
        np.testing.assert_allclose(floats(values).reshape(shape), keras_slot.numpy(), rtol=RTOL, atol=ATOL,
                                   err_msg=f"{optimizer}: slot {name}")
    assert bits(variable.numpy()) != bits(initial)
