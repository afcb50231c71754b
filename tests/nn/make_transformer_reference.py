#!/usr/bin/python3
"""Writes tests/nn/transformer_reference.json: PyTorch's outputs and gradients for the Transformer layers on fixed
weights in Keras's layout, for tests/nn/transformer_test.cc to compare strata's against.

Regenerate (needs numpy and torch; the C++ test only reads the committed JSON):
    /usr/bin/python3 tests/nn/make_transformer_reference.py > tests/nn/transformer_reference.json

Cases (each: inputs, weights, an upstream gradient r; the loss is sum(output * r); recorded are the output and
d loss / d (inputs, weights)):
  layer_norm   torch.nn.functional.layer_norm over the last axis (Keras's LayerNormalization, epsilon 1e-3).
  gelu         torch.nn.functional.gelu, the exact (erf) form, Keras's gelu(approximate=False).
  mha_*        multi-head attention written with einsum on Keras's EinsumDense kernels: query/key/value kernels
               [d, heads, dim] with biases [heads, dim], output kernel [heads, value_dim, d_out] with bias [d_out];
               the scores of q / sqrt(key_dim) and k, -1e9 added where the mask is 0, softmax, then v. The einsum is
               first checked against torch.nn.MultiheadAttention (whose in/out projections are these kernels
               reshaped) on a causal, padded self-attention case, so the reference is PyTorch's attention.
               mha_cross: query, value and key of different sizes, value_dim != key_dim, output_shape, no mask.
               mha_self_masked: self-attention with a causal mask and a padding mask of the keys.
  encoder      a pre-norm Transformer encoder block (keras_hub's TransformerEncoder with normalize_first=True):
               x + MHA(LN(x)), then + Dense(Dense_gelu(LN(.))).
  conv1d_*     torch.nn.functional.conv1d on [batch, channels, steps] with the Keras kernel [k, in, filters] as
               PyTorch's [filters, in, k], padded first as Keras pads: "same" by TensorFlow's rule (the odd step
               after), "causal" (k - 1) * dilation zeros before.
               conv1d_same_strided: same, strides 2, an even kernel (uneven padding), bias, linear.
               conv1d_causal_dilated: causal, dilation_rate 2, bias, relu.
"""
import json
import math

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)  # the reference in double; the C++ side checks its floats


def draw(rng, *shape, scale=0.5):
    return rng.uniform(-scale, scale, size=shape).astype(np.float32).astype(np.float64)


def as_list(t):
    a = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    return {"shape": list(a.shape), "values": [float(np.float32(v)) for v in a.astype(np.float64).ravel()]}


def leaves(arrays):
    return {k: torch.tensor(v, requires_grad=True) for k, v in arrays.items()}


def mha(q_in, v_in, k_in, w, heads, key_dim, mask=None):
    """Keras's MultiHeadAttention on leaves: w holds query/key/value/output kernels and biases (Keras's names)."""
    q = torch.einsum("btd,dhk->bthk", q_in, w["query_kernel"]) + w["query_bias"]
    k = torch.einsum("bsd,dhk->bshk", k_in, w["key_kernel"]) + w["key_bias"]
    v = torch.einsum("bsd,dhk->bshk", v_in, w["value_kernel"]) + w["value_bias"]
    q = q / math.sqrt(key_dim)
    scores = torch.einsum("bthk,bshk->bhts", q, k)
    if mask is not None:  # mask [B, T, S], 1 attends
        scores = scores + (1.0 - mask[:, None, :, :]) * -1e9
    probs = torch.softmax(scores, dim=-1)
    context = torch.einsum("bhts,bshk->bthk", probs, v)
    return torch.einsum("bthk,hkd->btd", context, w["output_kernel"]) + w["output_bias"]


def mha_weights(rng, dq, dv, dk, heads, key_dim, value_dim, out):
    return {"query_kernel": draw(rng, dq, heads, key_dim), "query_bias": draw(rng, heads, key_dim),
            "key_kernel": draw(rng, dk, heads, key_dim), "key_bias": draw(rng, heads, key_dim),
            "value_kernel": draw(rng, dv, heads, value_dim), "value_bias": draw(rng, heads, value_dim),
            "output_kernel": draw(rng, heads, value_dim, out), "output_bias": draw(rng, out)}


def causal_and_padding_mask(batch, steps, valid):
    """[B, T, T]: position i attends j <= i among the first valid[b] positions of example b."""
    m = np.tril(np.ones((steps, steps)))[None].repeat(batch, axis=0)
    for b, n in enumerate(valid):
        m[b, :, n:] = 0
    return m


def check_einsum_against_torch_mha(rng):
    """torch.nn.MultiheadAttention with the same weights gives the einsum's result (masks included)."""
    batch, steps, heads, key_dim = 2, 5, 2, 3
    embed = heads * key_dim
    w = mha_weights(rng, embed, embed, embed, heads, key_dim, key_dim, embed)
    x = draw(rng, batch, steps, embed, scale=1.0)
    valid = [5, 3]
    mask = causal_and_padding_mask(batch, steps, valid)
    module = torch.nn.MultiheadAttention(embed, heads, batch_first=True)
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.tensor(np.concatenate(
            [w[n].reshape(embed, embed).T for n in ("query_kernel", "key_kernel", "value_kernel")])))
        module.in_proj_bias.copy_(torch.tensor(np.concatenate(
            [w[n].reshape(embed) for n in ("query_bias", "key_bias", "value_bias")])))
        module.out_proj.weight.copy_(torch.tensor(w["output_kernel"].reshape(embed, embed).T))
        module.out_proj.bias.copy_(torch.tensor(w["output_bias"]))
    xt = torch.tensor(x)
    # PyTorch's attn_mask is True where attention is NOT allowed, one per (batch * head).
    blocked = torch.tensor(mask == 0).repeat_interleave(heads, dim=0)
    expected, _ = module(xt, xt, xt, attn_mask=blocked, need_weights=False)
    got = mha(xt, xt, xt, {k: torch.tensor(v) for k, v in w.items()}, heads, key_dim, torch.tensor(mask))
    err = (expected - got).abs().max().item()
    assert err < 1e-10, f"einsum attention differs from torch.nn.MultiheadAttention by {err}"
    return err


def mha_case(rng, batch, t, s, dq, dv, dk, heads, key_dim, value_dim, out, self_attention, mask):
    w = mha_weights(rng, dq, dv, dk, heads, key_dim, value_dim, out)
    arrays = {"query": draw(rng, batch, t, dq, scale=1.0)}
    if not self_attention:
        arrays["value"] = draw(rng, batch, s, dv, scale=1.0)
        arrays["key"] = draw(rng, batch, s, dk, scale=1.0)
    lv = leaves({**arrays, **w})
    q = lv["query"]
    v = q if self_attention else lv["value"]
    k = q if self_attention else lv["key"]
    y = mha(q, v, k, lv, heads, key_dim, None if mask is None else torch.tensor(mask))
    r = draw(rng, *y.shape, scale=1.0)
    (y * torch.tensor(r)).sum().backward()
    case = {"num_heads": heads, "key_dim": key_dim, "value_dim": value_dim, "output_shape": out,
            "r": as_list(r), "output": as_list(y)}
    if mask is not None:
        case["attention_mask"] = as_list(mask)
    for name, value in {**arrays, **w}.items():
        case[name] = as_list(value)
        case["grad_" + name] = as_list(lv[name].grad)
    return case


def layer_norm_case(rng):
    x, gamma, beta = draw(rng, 2, 3, 5, scale=2.0), draw(rng, 5) + 1.0, draw(rng, 5)
    lv = leaves({"x": x, "gamma": gamma, "beta": beta})
    y = F.layer_norm(lv["x"], (5,), lv["gamma"], lv["beta"], eps=1e-3)
    r = draw(rng, *y.shape, scale=1.0)
    (y * torch.tensor(r)).sum().backward()
    return {"epsilon": 1e-3, "x": as_list(x), "gamma": as_list(gamma), "beta": as_list(beta), "r": as_list(r),
            "output": as_list(y), "grad_x": as_list(lv["x"].grad), "grad_gamma": as_list(lv["gamma"].grad),
            "grad_beta": as_list(lv["beta"].grad)}


def gelu_case(rng):
    x = np.linspace(-4.0, 4.0, 17).astype(np.float32).astype(np.float64).reshape(1, 17)
    xt = torch.tensor(x, requires_grad=True)
    y = F.gelu(xt)  # approximate='none': the erf form
    y.sum().backward()
    return {"x": as_list(x), "output": as_list(y), "grad_x": as_list(xt.grad)}


def encoder_case(rng):
    batch, steps, hidden, heads, inter, eps = 2, 4, 6, 2, 8, 1e-5
    key_dim = hidden // heads
    w = {"ln1_gamma": draw(rng, hidden) + 1.0, "ln1_beta": draw(rng, hidden),
         **mha_weights(rng, hidden, hidden, hidden, heads, key_dim, key_dim, hidden),
         "ln2_gamma": draw(rng, hidden) + 1.0, "ln2_beta": draw(rng, hidden),
         "inter_kernel": draw(rng, hidden, inter), "inter_bias": draw(rng, inter),
         "out_kernel": draw(rng, inter, hidden), "out_bias": draw(rng, hidden)}
    x = draw(rng, batch, steps, hidden, scale=1.0)
    lv = leaves({"x": x, **w})
    h = F.layer_norm(lv["x"], (hidden,), lv["ln1_gamma"], lv["ln1_beta"], eps=eps)
    x1 = lv["x"] + mha(h, h, h, lv, heads, key_dim)
    h = F.layer_norm(x1, (hidden,), lv["ln2_gamma"], lv["ln2_beta"], eps=eps)
    h = F.gelu(h @ lv["inter_kernel"] + lv["inter_bias"]) @ lv["out_kernel"] + lv["out_bias"]
    y = x1 + h
    r = draw(rng, *y.shape, scale=1.0)
    (y * torch.tensor(r)).sum().backward()
    case = {"num_heads": heads, "intermediate_dim": inter, "layer_norm_epsilon": eps, "activation": "gelu",
            "r": as_list(r), "output": as_list(y)}
    for name, value in {"x": x, **w}.items():
        case[name] = as_list(value)
        case["grad_" + name] = as_list(lv[name].grad)
    return case


def conv1d_case(rng, batch, steps, channels, filters, kernel_size, strides, padding, dilation, activation):
    w = {"kernel": draw(rng, kernel_size, channels, filters), "bias": draw(rng, filters)}
    x = draw(rng, batch, steps, channels, scale=1.0)
    lv = leaves({"x": x, **w})
    span = (kernel_size - 1) * dilation + 1
    if padding == "same":
        total = max((math.ceil(steps / strides) - 1) * strides + span - steps, 0)
        pads = (total // 2, total - total // 2)
    elif padding == "causal":
        pads = (span - 1, 0)
    else:
        pads = (0, 0)
    xt = F.pad(lv["x"].permute(0, 2, 1), pads)
    y = F.conv1d(xt, lv["kernel"].permute(2, 1, 0), lv["bias"], stride=strides, dilation=dilation).permute(0, 2, 1)
    if activation == "relu":
        y = torch.relu(y)
    r = draw(rng, *y.shape, scale=1.0)
    (y * torch.tensor(r)).sum().backward()
    case = {"filters": filters, "kernel_size": kernel_size, "strides": strides, "padding": padding,
            "dilation_rate": dilation, "activation": activation, "r": as_list(r), "output": as_list(y)}
    for name, value in {"x": x, **w}.items():
        case[name] = as_list(value)
        case["grad_" + name] = as_list(lv[name].grad)
    return case


def main():
    rng = np.random.default_rng(42)
    err = check_einsum_against_torch_mha(rng)
    out = {
        "torch": torch.__version__,
        "einsum_vs_torch_multihead_attention": err,
        "layer_norm": layer_norm_case(rng),
        "gelu": gelu_case(rng),
        "mha_cross": mha_case(rng, 2, 4, 3, dq=6, dv=5, dk=4, heads=2, key_dim=3, value_dim=2, out=7,
                              self_attention=False, mask=None),
        "mha_self_masked": mha_case(rng, 2, 5, 5, dq=4, dv=4, dk=4, heads=2, key_dim=3, value_dim=3, out=4,
                                    self_attention=True, mask=causal_and_padding_mask(2, 5, [5, 3])),
        "encoder": encoder_case(rng),
        # (Drawn after the cases above, so adding them left those unchanged.)
        "conv1d_same_strided": conv1d_case(rng, 2, 7, 3, 4, kernel_size=4, strides=2, padding="same", dilation=1,
                                           activation="linear"),
        "conv1d_causal_dilated": conv1d_case(rng, 2, 6, 2, 3, kernel_size=3, strides=1, padding="causal",
                                             dilation=2, activation="relu"),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
