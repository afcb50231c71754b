#!/usr/bin/env python3
"""strata's CPU kernels against the raw libraries they wrap, TensorFlow, PyTorch 2 and Debian's PyTorch 1.13, at 1 and
2 threads.

Runs the C++ program bench/kernels_bench (built from kernels_bench.cc) and the same shapes in each peer, then prints a
table of median times and each peer's time over strata's (above 1.0: strata is faster). The ops are the tutorial
CNN's and MLP's: the matmuls of a 256x784x128 dense layer (forward and both backward products) and 1024^3, the 3x3
convolution on 64 28x28x1 images (forward, input gradient, weight+bias gradients), and 2x2 max pooling.

    .venv-peers/bin/peer-python bench/kernels_bench.py [--binary build/bench/kernels_bench] [--reps 20] [--rounds 2]
        [--threads 1,2] [--no-tf] [--no-torch] [--no-debian-torch]

Each peer runs in a child process per thread count, with its threads pinned before it loads (see peers.py):
  TensorFlow  each op (tf.linalg.matmul with its transpose flags; tf.nn.conv2d + bias_add, Conv2DBackpropInput,
              Conv2DBackpropFilter + BiasAddGrad; MaxPool, MaxPoolGrad) as a tf.function of that op alone, NHWC as
              strata: its times include TensorFlow's call of a function, printed beside them (the time of a
              tf.function returning its input);
  PyTorch     torch.mm on transposed views, F.conv2d and aten.convolution_backward, max_pool2d_with_indices and its
              backward, in NCHW and channels_last; the faster layout counts. OPENBLAS_NUM_THREADS=n for Debian's
              1.13, whose torch.mm calls OpenBLAS (PyTorch 2's wheel calls MKL).
Debian's 1.13 column stays because its convolution is the one the issue found slow (4.5 ms against strata's 0.22 ms
forward); it appears where /usr/bin/python3 has torch (package python3-torch).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import peers
from bench_common import find_binary


MATMULS = [  # name, M, N, K, trans_a, trans_b (C[M, N] = op(A) op(B))
    ("256x784x128/fwd", 256, 128, 784, False, False),
    ("256x784x128/dA=dY.Bt", 256, 784, 128, False, True),
    ("256x784x128/dB=At.dY", 784, 128, 256, True, False),
    ("1024^3", 1024, 1024, 1024, False, False),
]
CONV_ROWS = ["forward", "backward_input", "backward_weights", "fwd+bwd_all", "fwd+bwd_weights"]
POOL_ROWS = ["forward", "backward"]


def median_ms(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def best_of(runs):
    """Per key, the smallest median over several rounds: the round least disturbed by other work."""
    return {k: min(r[k] for r in runs) for k in runs[0]}


def torch_worker(threads, reps, warmup):
    """Runs in the child process; prints {name: ms} as JSON."""
    import torch
    import torch.nn.functional as F

    peers.pin_torch(threads)
    torch.manual_seed(0)
    out = {"version": torch.__version__}
    with torch.no_grad():
        for name, m, n, k, ta, tb in MATMULS:
            a = torch.rand(k, m).t() if ta else torch.rand(m, k)  # transposed views, as BLAS sees them
            b = torch.rand(n, k).t() if tb else torch.rand(k, n)
            r = max(5, reps // 3) if m * n * k >= 1 << 28 else reps
            out[f"matmul/{name}/torch"] = median_ms(lambda: torch.mm(a, b), r, warmup)

        conv_bwd = torch.ops.aten.convolution_backward
        for layout, fmt in (("torch", torch.contiguous_format), ("torch_cl", torch.channels_last)):
            x = (torch.rand(64, 1, 28, 28) * 2 - 1).contiguous(memory_format=fmt)  # NCHW (or NHWC in memory)
            w = (torch.rand(32, 1, 3, 3) * 2 - 1).contiguous(memory_format=fmt)
            bias = torch.rand(32) * 2 - 1
            dy = (torch.rand(64, 32, 26, 26) * 2 - 1).contiguous(memory_format=fmt)

            def bwd(mask):
                return conv_bwd(dy, x, w, [32], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, mask)

            fwd = lambda: F.conv2d(x, w, bias)
            out[f"conv/forward/{layout}"] = median_ms(fwd, reps, warmup)
            out[f"conv/backward_input/{layout}"] = median_ms(lambda: bwd([True, False, False]), reps, warmup)
            out[f"conv/backward_weights/{layout}"] = median_ms(lambda: bwd([False, True, True]), reps, warmup)
            out[f"conv/fwd+bwd_all/{layout}"] = median_ms(lambda: (fwd(), bwd([True, True, True])), reps, warmup)
            out[f"conv/fwd+bwd_weights/{layout}"] = median_ms(lambda: (fwd(), bwd([False, True, True])), reps,
                                                              warmup)

            px = (torch.rand(64, 32, 26, 26) * 2 - 1).contiguous(memory_format=fmt)
            pool_args = ([2, 2], [2, 2], [0, 0], [1, 1], False)
            py, idx = torch.ops.aten.max_pool2d_with_indices(px, *pool_args)
            out[f"max_pool/forward/{layout}"] = median_ms(
                lambda: torch.ops.aten.max_pool2d_with_indices(px, *pool_args), reps, warmup)
            out[f"max_pool/backward/{layout}"] = median_ms(
                lambda: torch.ops.aten.max_pool2d_with_indices_backward(py, px, *pool_args, idx), reps, warmup)
    print(json.dumps(out))


def tf_worker(threads, reps, warmup):
    """Runs in the child process; prints {name: ms} as JSON, each the op's tf.function less "call_ms", the time of a
    tf.function that returns its input (TensorFlow's cost of calling a function, which a graph of many ops pays
    once)."""
    peers.pin_tf(threads)
    import tensorflow as tf

    tf.random.set_seed(0)
    out = {"version": tf.__version__}

    def timed(fn, *inputs, r=reps):
        f = tf.function(fn)
        return median_ms(lambda: tf.nest.map_structure(lambda t: t.numpy(), f(*inputs)), r, warmup) - out["call_ms"]

    out["call_ms"] = 0.0
    out["call_ms"] = timed(lambda t: t, tf.zeros([4]), r=max(reps, 100))
    for name, m, n, k, ta, tb in MATMULS:
        a = tf.random.uniform([k, m] if ta else [m, k])
        b = tf.random.uniform([n, k] if tb else [k, n])
        r = max(5, reps // 3) if m * n * k >= 1 << 28 else reps
        out[f"matmul/{name}/tf"] = timed(lambda a, b, ta=ta, tb=tb: tf.linalg.matmul(a, b, transpose_a=ta,
                                                                                     transpose_b=tb), a, b, r=r)
    x = tf.random.uniform([64, 28, 28, 1], -1, 1)
    w = tf.random.uniform([3, 3, 1, 32], -1, 1)
    bias = tf.random.uniform([32], -1, 1)
    dy = tf.random.uniform([64, 26, 26, 32], -1, 1)
    one = [1, 1, 1, 1]

    def fwd(x, w, bias):
        return tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "VALID"), bias)

    def bwd_input(w, dy):
        return tf.raw_ops.Conv2DBackpropInput(input_sizes=[64, 28, 28, 1], filter=w, out_backprop=dy, strides=one,
                                              padding="VALID")

    def bwd_weights(x, dy):
        return (tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=[3, 3, 1, 32], out_backprop=dy, strides=one,
                                                padding="VALID"), tf.raw_ops.BiasAddGrad(out_backprop=dy))

    out["conv/forward/tf"] = timed(fwd, x, w, bias)
    out["conv/backward_input/tf"] = timed(bwd_input, w, dy)
    out["conv/backward_weights/tf"] = timed(bwd_weights, x, dy)
    out["conv/fwd+bwd_all/tf"] = timed(lambda x, w, b, dy: (fwd(x, w, b), bwd_input(w, dy), bwd_weights(x, dy)),
                                       x, w, bias, dy)
    out["conv/fwd+bwd_weights/tf"] = timed(lambda x, w, b, dy: (fwd(x, w, b), bwd_weights(x, dy)), x, w, bias, dy)
    px = tf.random.uniform([64, 26, 26, 32], -1, 1)
    py = tf.nn.max_pool2d(px, 2, 2, "VALID")
    dpy = tf.random.uniform(py.shape, -1, 1)
    out["max_pool/forward/tf"] = timed(lambda p: tf.nn.max_pool2d(p, 2, 2, "VALID"), px)

    def pool_with_gradient(p, g):  # as training computes it: the oneDNN MaxPoolGrad takes the forward's workspace
        with tf.GradientTape() as tape:
            tape.watch(p)
            q = tf.nn.max_pool2d(p, 2, 2, "VALID")
        return tape.gradient(q, p, output_gradients=g)

    out["max_pool/backward/tf"] = timed(pool_with_gradient, px, dpy) - out["max_pool/forward/tf"]
    print(json.dumps(out))


def run_strata(binary, threads, reps, warmup):
    env = peers.env(threads, OPENBLAS_NUM_THREADS=str(threads))  # its openblas row calls OpenBLAS at n threads
    text = subprocess.run([binary, "--threads", str(threads), "--reps", str(reps), "--warmup", str(warmup)],
                          check=True, capture_output=True, text=True, env=env).stdout
    return {k: float(v) for k, v in (line.split("\t") for line in text.splitlines() if line.strip())}


def run_peer(peer, threads, reps, warmup):
    extra = {"OPENBLAS_NUM_THREADS": str(threads)} if peer.key == "torch1" else {}
    return peers.run_json([peer.python, os.path.abspath(__file__), f"--{peer.key}-worker", str(threads), "--reps",
                           str(reps), "--warmup", str(warmup)], peers.env(threads, **extra))


def peer_ms(peer_key, result, key):
    """A peer's time for op `key` ("conv/forward"): PyTorch's faster layout, TensorFlow's one."""
    if peer_key == "tf":
        return result[key + "/tf"]
    return min(result[key + "/torch"], result.get(key + "/torch_cl", float("inf")))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", help="path to kernels_bench (default: build*/bench/kernels_bench)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of every side; the best median is kept")
    for key in ("tf", "torch", "torch1"):
        ap.add_argument(f"--{key}-worker", type=int, help=argparse.SUPPRESS)
    peers.add_arguments(ap, debian_torch=True)
    args = ap.parse_args()
    if args.tf_worker:
        return tf_worker(args.tf_worker, args.reps, args.warmup)
    if args.torch_worker or args.torch1_worker:
        return torch_worker(args.torch_worker or args.torch1_worker, args.reps, args.warmup)

    binary = find_binary("kernels_bench", args.binary)
    found = peers.find(args, debian_torch=True)
    sides = [p for p in found.values() if p.ok]
    short = {"tf": "TF", "torch": "PT2", "torch1": "PT1.13"}
    print(f"strata: {binary}; median of {args.reps} runs after {args.warmup} warm-up (1024^3: a third of the runs), "
          f"best of {args.rounds} rounds")
    header = (f"{'op':<30} {'thr':>3} {'strata ms':>9} {'sgemm ms':>9} {'openblas':>9}"
              + "".join(f"{short[p.key] + ' ms':>10}" for p in sides) + f" {'sgemm/s':>8}"
              + "".join(f"{short[p.key] + '/s':>9}" for p in sides))
    print(header)
    print("-" * len(header))
    call_ms = {}
    for threads in [int(t) for t in args.threads.split(",")]:
        s_runs, p_runs = [], {p.key: [] for p in sides}
        for _ in range(args.rounds):  # alternate, so slow spells of a shared machine hit every side
            s_runs.append(run_strata(binary, threads, args.reps, args.warmup))
            for p in sides:
                p_runs[p.key].append(run_peer(p, threads, args.reps, args.warmup))
        s = best_of(s_runs)
        best = {k: {n: min(r[n] for r in runs) for n in runs[0] if n != "version"} for k, runs in p_runs.items()}
        if "tf" in best:
            call_ms[threads] = best["tf"]["call_ms"]
        rows = [(f"matmul/{name}", True) for name, *_ in MATMULS]
        rows += [(f"conv/{row}", False) for row in CONV_ROWS] + [(f"max_pool/{row}", False) for row in POOL_ROWS]
        for key, blas in rows:
            st = s[key + "/strata"]
            line = f"{key.replace('/', ' ', 1):<30} {threads:>3} {st:9.3f}"
            line += f" {s[key + '/dnnl_sgemm']:9.3f} {s[key + '/openblas']:9.3f}" if blas else f" {'':>9} {'':>9}"
            times = {p.key: peer_ms(p.key, best[p.key], key) for p in sides}
            line += "".join(f"{times[p.key]:10.3f}" for p in sides)
            line += f" {s[key + '/dnnl_sgemm'] / st:8.2f}" if blas else f" {'':>8}"
            line += "".join(f"{peers.ratio(times[p.key], st):>9}" for p in sides)
            print(line)
        print()
    print("X/s: X's time over strata's (above 1: strata is faster); sgemm/s: the raw dnnl_sgemm call kernels::matmul")
    print("  makes (into a preallocated output, timed round-robin with strata) over strata's; openblas: cblas_sgemm")
    print("  on its own pool, for reference.")
    for threads, ms in call_ms.items():
        print(f"TF ms: each op as a tf.function of its own, less TensorFlow's call of a tf.function that returns its "
              f"input ({ms * 1e3:.0f} us at {threads} thread(s)).")
    print("conv: N=64, 28x28x1 -> 26x26x32, 3x3 VALID, with bias; strata and TF NHWC/HWIO; PyTorch the faster of NCHW")
    print("  and channels_last. fwd+bwd_all = forward + input grad + weight/bias grads; fwd+bwd_weights = a first")
    print("  layer's step (its input needs no gradient).")
    print("max_pool: 2x2 stride 2 on [64, 26, 26, 32] (NHWC; PyTorch [64, 32, 26, 26]); strata and PyTorch keep the")
    print("  argmax (indices / workspace) in the forward; TensorFlow's backward is forward + gradient (GradientTape, as in")
    print("  training, where its oneDNN MaxPoolGrad reads the forward's workspace) less the forward.")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
