#!/usr/bin/python3
"""Writes tests/nn/recurrent_reference.json: PyTorch's nn.LSTM / nn.GRU outputs and gradients on weights
given in Keras's layout, for tests/nn/recurrent_test.cc to compare strata's LSTM and GRU against.

Regenerate (needs numpy and torch; the C++ test only reads the committed JSON):
    /usr/bin/python3 tests/nn/make_recurrent_reference.py > tests/nn/recurrent_reference.json

Keras -> PyTorch: LSTM gates are i, f, c(g), o in both, so weight_ih = kernel^T, weight_hh = recurrent_kernel^T,
bias_ih = bias, bias_hh = 0. GRU gates are z, r, h in Keras and r, z, n in PyTorch; with Keras's
reset_after=True, bias[0] is PyTorch's b_ih and bias[1] its b_hh (b_hn sits inside r * (W_hn h + b_hn) in both).
Each case: input x [batch, time, features], weights, upstream gradient r of the sequence output; the
loss is sum(sequence * r); recorded are the sequence, the final states and d loss / d (x, weights).
"""
import json

import numpy as np
import torch

torch.set_default_dtype(torch.float64)  # the reference in double; the C++ side checks its floats to 1e-5
BATCH, TIME, FEATURES, UNITS = 3, 5, 4, 6


def draw(rng, *shape, scale=0.5):
    return rng.uniform(-scale, scale, size=shape).astype(np.float32).astype(np.float64)


def as_list(t):
    a = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    return {"shape": list(a.shape), "values": [float(np.float32(v)) for v in a.astype(np.float64).ravel()]}


def run(module, params, x, r):
    """Sets the module's parameters, runs it on x and backpropagates sum(sequence * r)."""
    with torch.no_grad():
        for name, value in params.items():
            getattr(module, name).copy_(torch.tensor(value))
    xt = torch.tensor(x, requires_grad=True)
    seq, state = module(xt)
    (seq * torch.tensor(r)).sum().backward()
    grads = {name: getattr(module, name).grad.numpy() for name in params}
    return xt, seq, state, grads


def lstm_case(rng):
    x, r = draw(rng, BATCH, TIME, FEATURES, scale=1.0), draw(rng, BATCH, TIME, UNITS, scale=1.0)
    kernel, recurrent, bias = draw(rng, FEATURES, 4 * UNITS), draw(rng, UNITS, 4 * UNITS), draw(rng, 4 * UNITS)
    # Same gate order: only transposes.
    params = {"weight_ih_l0": kernel.T, "weight_hh_l0": recurrent.T, "bias_ih_l0": bias,
              "bias_hh_l0": np.zeros(4 * UNITS)}
    xt, seq, (h, c), g = run(torch.nn.LSTM(FEATURES, UNITS, batch_first=True), params, x, r)
    return {"x": as_list(x), "r": as_list(r), "kernel": as_list(kernel), "recurrent_kernel": as_list(recurrent),
            "bias": as_list(bias), "sequence": as_list(seq), "h": as_list(h[0]), "c": as_list(c[0]),
            "grad_x": as_list(xt.grad), "grad_kernel": as_list(g["weight_ih_l0"].T),
            "grad_recurrent_kernel": as_list(g["weight_hh_l0"].T), "grad_bias": as_list(g["bias_ih_l0"])}


def z_r_h_to_r_z_n(w):
    """Keras's gate blocks z, r, h along the last axis -> PyTorch's r, z, n."""
    z, r, h = np.split(w, 3, axis=-1)
    return np.concatenate([r, z, h], axis=-1)


def r_z_n_to_z_r_h(w):
    r, z, n = np.split(w, 3, axis=-1)
    return np.concatenate([z, r, n], axis=-1)


def gru_case(rng):
    x, r = draw(rng, BATCH, TIME, FEATURES, scale=1.0), draw(rng, BATCH, TIME, UNITS, scale=1.0)
    kernel, recurrent, bias = draw(rng, FEATURES, 3 * UNITS), draw(rng, UNITS, 3 * UNITS), draw(rng, 2, 3 * UNITS)
    params = {"weight_ih_l0": z_r_h_to_r_z_n(kernel).T, "weight_hh_l0": z_r_h_to_r_z_n(recurrent).T,
              "bias_ih_l0": z_r_h_to_r_z_n(bias[0]), "bias_hh_l0": z_r_h_to_r_z_n(bias[1])}
    xt, seq, h, g = run(torch.nn.GRU(FEATURES, UNITS, batch_first=True), params, x, r)
    grad_bias = np.stack([r_z_n_to_z_r_h(g["bias_ih_l0"]), r_z_n_to_z_r_h(g["bias_hh_l0"])])
    return {"x": as_list(x), "r": as_list(r), "kernel": as_list(kernel), "recurrent_kernel": as_list(recurrent),
            "bias": as_list(bias), "sequence": as_list(seq), "h": as_list(h[0]), "grad_x": as_list(xt.grad),
            "grad_kernel": as_list(r_z_n_to_z_r_h(g["weight_ih_l0"].T)),
            "grad_recurrent_kernel": as_list(r_z_n_to_z_r_h(g["weight_hh_l0"].T)), "grad_bias": as_list(grad_bias)}


def main():
    rng = np.random.default_rng(19)
    out = {"generator": "tests/nn/make_recurrent_reference.py", "torch": torch.__version__,
           "lstm": lstm_case(rng), "gru": gru_case(rng)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
