#!/usr/bin/env python3
"""Training throughput on one device: strata's Model::fit against Keras fit (TensorFlow) and PyTorch 2, on Fashion-MNIST.

Three models: the Keras tutorial CNN (Conv2D 32 3x3 relu -> MaxPool 2 -> Flatten -> Dense 64 relu -> Dense 10), a
784-128-10 MLP, and the Transformer of configs/fashion_mnist_transformer.yaml (peers.py's TRANSFORMER: 28 rows as
tokens, a Conv1D stem, 2 pre-norm encoder blocks) in float32 and, as "transformer-bf16", computing in bf16 with
float32 weights on every side (strata --mixed-precision bf16, Keras's mixed_bfloat16 policy, torch.autocast to
bfloat16); all with Adam(1e-3, eps 1e-7) and sparse categorical cross-entropy from logits, the accuracy metric,
batch 64, at 1 and 2 threads. The transformer rows also print each side's step time in ms. Prints images/s of each side and the ratios strata/TensorFlow and strata/PyTorch 2
(above 1.0: strata is faster; the issue's CNN targets are 3 and 2), and strata/Debian's PyTorch 1.13 where
/usr/bin/python3 has it (the peer the benches had before, kept here for its slow convolution: --no-debian-torch).

    .venv-peers/bin/peer-python bench/models_bench.py [--binary build/bench/models_bench] [--steps 300]
        [--models cnn,mlp,transformer,transformer-bf16] [--threads 1,2] [--rounds 1] [--no-tf] [--no-torch] [--no-debian-torch] [--tf-jit]

Same steps on every side: a warm-up of --steps steps (one-time set-up: oneDNN primitives, tracing, allocators), then
--steps timed steps (--steps 0: one pass over the 60000 images each). Each side trains from data decoded in memory,
shuffled over the whole set:
  strata   Model::fit (models_bench --steps-per-epoch S: a warm-up epoch of S steps, then the timed one); its input
           pipeline (shuffle, batch, normalise) on one prefetch thread beside the n compute threads;
  Keras    fit on tf.data (from_tensor_slices of the images already scaled to [0, 1], shuffle(60000), batch(64),
           prefetch; tf.data's private pool of 1 thread, as strata's prefetch thread), compiled with Keras's default
           jit_compile="auto", which Keras 3 turns off on a machine without a GPU (--tf-jit: jit_compile=True, XLA);
           timed by a callback from the first timed step's start to the epoch's end;
  PyTorch  batches sliced from one tensor (its fastest path, no DataLoader), zero_grad/forward/backward/step and the
           accuracy, as the other two keep it.
Threads: see peers.py (TensorFlow intra-op n, inter-op 1; torch.set_num_threads(n); OpenBLAS 1). Every side runs in
a child process of its own, started with the thread settings in its environment, and the sides alternate in each
round; each side's best round counts (the machine is shared: single runs vary by tens of percent).
Where the CNN misses a target, the bench measures what bounds it: strata's CPU time per step alone (models_bench
--steps) against its fit step, TensorFlow's fit step against its train_step called alone, and each side's step in
phases (forward with the loss, backward, the update): strata's from a trace of fit (distribute_bench --trace),
TensorFlow's from tf.functions of each phase; bench/kernels_bench.py then has the ops of each phase.
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

BATCH = 64


def batches(x, y, batch):
    """Shuffled batches forever, a new order each pass (PyTorch side)."""
    import torch
    while True:
        perm = torch.randperm(x.shape[0])
        for start in range(0, x.shape[0] - batch + 1, batch):
            idx = perm[start:start + batch]
            yield x[idx], y[idx]


def split_precision(model_name):
    """'transformer-bf16' -> ('transformer', True): the model, and whether it computes in bf16 (Keras's
    mixed_bfloat16 policy, torch.autocast to bfloat16 on the CPU, strata's --mixed-precision bf16)."""
    base, _, precision = model_name.partition("-")
    return base, precision == "bf16"


def torch_worker(model_name, threads, data_dir, steps, batch=BATCH):
    """Prints the images/s of `steps` PyTorch steps after as many warm-up steps, as JSON; distribute_bench uses it."""
    import contextlib

    import torch
    import torch.nn as nn

    peers.pin_torch(threads)
    torch.manual_seed(0)
    xs, ys = peers.fashion_mnist(data_dir)
    x = torch.from_numpy(xs).permute(0, 3, 1, 2).contiguous()  # NCHW
    y = torch.from_numpy(ys)
    model_name, bf16 = split_precision(model_name)
    model = peers.torch_model(model_name)
    compute = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    it = batches(x, y, batch)

    def run(n):
        for _ in range(n):
            xb, yb = next(it)
            opt.zero_grad()
            with compute():
                logits = model(xb)
                loss = loss_fn(logits.float(), yb)
            loss.backward()
            opt.step()
            (logits.argmax(1) == yb).sum().item()  # the accuracy metric every side keeps

    run(steps)
    start = time.perf_counter()
    run(steps)
    seconds = time.perf_counter() - start
    print(json.dumps({"images_per_s": steps * batch / seconds, "seconds": seconds, "version": torch.__version__}))


def tf_dataset(model_name, data_dir, batch):
    import tensorflow as tf
    x, y = peers.fashion_mnist(data_dir)
    if model_name == "mlp":
        x = x.reshape(-1, 784)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    return (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(60000, seed=0).batch(batch, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE).with_options(options))


def tf_worker(model_name, threads, data_dir, steps, jit, batch=BATCH):
    """Prints the images/s of `steps` Keras fit steps after as many warm-up steps, as JSON; with --bound, also the
    time per step of the compiled train_step called alone on one batch (the step without fit's loop and input)."""
    peers.pin_tf(threads)
    import keras
    import tensorflow as tf
    keras.utils.set_random_seed(0)
    model_name, bf16 = split_precision(model_name)
    if bf16:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = peers.keras_model(model_name)
    if jit:
        model.compile(optimizer=model.optimizer, loss=model.loss, metrics=["accuracy"], jit_compile=True)
    ds = tf_dataset(model_name, data_dir, batch)
    seconds = peers.keras_timed_fit(model, ds, steps, warmup_steps=steps)
    out = {"images_per_s": steps * batch / seconds, "seconds": seconds, "version": tf.__version__,
           "jit_compile": bool(model.jit_compile)}
    if "--bound" in sys.argv:
        out.update(tf_phases(model, ds, steps))
    print(json.dumps(out))


def tf_phases(model, ds, steps):
    """Microseconds per call (median) of Keras's step in phases, on one batch, each compiled as fit compiles its
    step: the forward pass with the loss; that and the gradients (tf.GradientTape); the whole train_step (plus Adam
    and the metrics). Their differences are the backward pass and the update. Each call's outputs are read back, as
    fit reads its logs."""
    import tensorflow as tf
    xb, yb = next(iter(ds))
    variables = model.trainable_variables

    def forward(x, y):
        return model.compute_loss(x, y, model(x, training=True))

    def gradients(x, y):
        with tf.GradientTape() as tape:
            loss = forward(x, y)
        return tape.gradient(loss, variables)

    def step(x, y):
        return model.train_step((x, y))

    fns = {name: tf.function(fn, jit_compile=model.jit_compile)
           for name, fn in (("forward_us", forward), ("gradients_us", gradients), ("step_us", step))}
    for fn in fns.values():
        for _ in range(20):
            fn(xb, yb)
    # Round-robin, one call of each per round, and the median of each: a slow spell of the shared machine falls on
    # all three alike, so their differences (the backward pass, the update) stay meaningful.
    times = {name: [] for name in fns}
    for _ in range(steps):
        for name, fn in fns.items():
            start = time.perf_counter()
            tf.nest.map_structure(lambda t: t.numpy(), fn(xb, yb))
            times[name].append((time.perf_counter() - start) * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def strata_phases(args, threads):
    """strata's forward, backward and optimizer time per step of the CNN at batch 64, from a trace of 100 steps of
    fit (distribute_bench --strategy one_device --trace, read as bench/trace_breakdown.py reads it); None when
    distribute_bench is not built."""
    import tempfile
    binary = os.path.join(os.path.dirname(find_binary("models_bench", args.binary)), "distribute_bench")
    if not os.path.exists(binary):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        run_child([binary, "--strategy", "one_device", "--replicas", "1", "--threads", str(threads), "--batch",
                   str(BATCH), "--data", args.data, "--trace", trace], threads)
        with open(trace) as f:
            spans = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = len({e["args"].get("step") for e in spans}) or 1
    per = {}
    for e in spans:
        per[e["name"]] = per.get(e["name"], 0.0) + e["dur"] / steps
    return per


def run_child(cmd, threads):
    return peers.run_json(cmd, peers.env(threads))


def run_strata(binary, model_name, threads, args, step_mode=False):
    base, bf16 = split_precision(model_name)
    cmd = [binary, "--model", base, "--threads", str(threads), "--data", args.data]
    if bf16:
        cmd += ["--mixed-precision", "bf16"]
    cmd += ["--steps", str(args.steps or 938)] if step_mode else ["--steps-per-epoch", str(args.steps)]
    return run_child(cmd, threads)


def run_peer(peer, model_name, threads, args, bound=False):
    cmd = [peer.python, os.path.abspath(__file__), f"--{peer.key}-worker", model_name, str(threads), "--data",
           args.data, "--steps", str(args.steps or 937)]
    if peer.key == "tf" and args.tf_jit:
        cmd.append("--tf-jit")
    if bound:
        cmd.append("--bound")
    return run_child(cmd, threads)


def explain_cnn(binary, threads, args, s, found, missed):
    """What bounds the CNN where a target is missed: each side's step alone against its step in fit, and in phases.
    Every figure compared is wall time; strata's CPU time of its step is printed beside, not compared."""
    print(f"  cnn at {threads} thread(s) misses {', '.join(missed)}; measuring what bounds it:")
    alone = run_strata(binary, "cnn", threads, args, step_mode=True)
    phases = strata_phases(args, threads)
    fit_us = BATCH / s["images_per_s"] * 1e6
    names = ("forward", "backward", "optimizer")
    line = f"    strata: {fit_us:.0f} us per fit step"
    if phases is not None:
        line += f"; its forward, backward and optimizer spans {sum(phases.get(n, 0.0) for n in names):.0f} us"
    print(line + f" (train_step alone: {alone['step_us']:.0f} us of the calling thread's CPU time)")
    if not found["tf"].ok:
        return
    t = run_peer(found["tf"], "cnn", threads, args, bound=True)
    fit_tf = BATCH / t["images_per_s"] * 1e6
    print(f"    TensorFlow: {fit_tf:.0f} us per fit step; Keras's compiled train_step alone on one batch "
          f"{t['step_us']:.0f} us")
    if phases is None:
        print("    (distribute_bench not built: no per-phase figures for strata)")
        return
    tf_phase = {"forward": t["forward_us"], "backward": t["gradients_us"] - t["forward_us"],
                "optimizer": t["step_us"] - t["gradients_us"]}
    print("    per phase, us per step (strata: spans of a trace of fit; TensorFlow: forward+loss, +gradients, +update "
          "and metrics, each a tf.function alone):")
    for name, tf_us in tf_phase.items():
        s_us = phases.get(name, 0.0)
        print(f"      {name:<10} strata {s_us:7.0f}  TensorFlow {tf_us:7.0f}  speed {peers.ratio(tf_us, s_us)}x")
    rest = fit_us - sum(phases.get(n, 0.0) for n in names)
    print(f"      strata's fit step beyond those spans: {rest:.0f} us (the loop, metrics, input hand-off)")
    print("    bench/kernels_bench.py times the CNN's convolution, pooling and matmul ops alone on each side.")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=None)
    parser.add_argument("--data", default=peers.FASHION_MNIST)
    parser.add_argument("--rounds", type=int, default=1, help="runs of each side; the best of each is reported")
    parser.add_argument("--models", default="cnn,mlp,transformer,transformer-bf16",
                        help="comma-separated subset of cnn, mlp, transformer, transformer-bf16")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--steps", type=int, default=300,
                        help="timed steps of batch 64 per side, after as many warm-up steps (0: one pass, 937 steps)")
    parser.add_argument("--tf-jit", action="store_true", help="Keras with jit_compile=True (XLA) instead of 'auto'")
    parser.add_argument("--bound", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tf-worker", nargs=2, metavar=("MODEL", "THREADS"), help=argparse.SUPPRESS)
    parser.add_argument("--torch-worker", nargs=2, metavar=("MODEL", "THREADS"), help=argparse.SUPPRESS)
    parser.add_argument("--torch1-worker", nargs=2, metavar=("MODEL", "THREADS"), help=argparse.SUPPRESS)
    peers.add_arguments(parser, debian_torch=True)
    args = parser.parse_args()
    steps = args.steps or 937
    if args.tf_worker:
        return tf_worker(args.tf_worker[0], int(args.tf_worker[1]), args.data, steps, args.tf_jit)
    if args.torch_worker or args.torch1_worker:
        model_name, threads = args.torch_worker or args.torch1_worker
        return torch_worker(model_name, int(threads), args.data, steps)
    binary = find_binary("models_bench", args.binary)
    found = peers.find(args, debian_torch=True)
    sides = [p for p in found.values() if p.ok]
    print(f"# Fashion-MNIST, batch {BATCH}, Adam; {steps} timed steps after {steps} warm-up steps per side; best of "
          f"{args.rounds} rounds; strata: {binary}")
    short = {"tf": "TF", "torch": "PT2", "torch1": "PT1.13"}
    head = f"{'model':<17}{'thr':>4}{'strata img/s':>14}" + "".join(f"{short[p.key] + ' img/s':>14}" for p in sides)
    head += "".join(f"{'s/' + short[p.key]:>9}" for p in sides) + f"{'strata acc':>12}"
    print(head)
    results = []
    for model_name in args.models.split(","):
        for threads in (int(t) for t in args.threads.split(",")):
            best = {}
            for _ in range(args.rounds):
                for key, fn in [("strata", lambda: run_strata(binary, model_name, threads, args))] + [
                        (p.key, lambda p=p: run_peer(p, model_name, threads, args)) for p in sides]:
                    r = fn()
                    if key not in best or r["images_per_s"] > best[key]["images_per_s"]:
                        best[key] = r
            s = best["strata"]
            line = f"{model_name:<17}{threads:>4}{s['images_per_s']:>14.0f}"
            line += "".join(f"{best[p.key]['images_per_s']:>14.0f}" for p in sides)
            line += "".join(f"{peers.ratio(s['images_per_s'], best[p.key]['images_per_s']):>9}" for p in sides)
            print(line + f"{s['test_accuracy']:>12.4f}", flush=True)
            results.append((model_name, threads, best))
    print("s/X: strata images/s over X's (above 1: strata is faster). Targets on the CNN: s/TF >= 3, s/PT2 >= 2.")
    for model_name, threads, best in results:
        if model_name.startswith("transformer"):
            print(f"{model_name} step at {threads} thread(s), ms: " + ", ".join(
                f"{'strata' if key == 'strata' else short[key]} {BATCH / r['images_per_s'] * 1e3:.2f}"
                for key, r in best.items()))
    if "tf" in found and found["tf"].ok:
        jit = results[0][2]["tf"]["jit_compile"] if results else False
        print(f"Keras jit_compile: {'on (XLA, --tf-jit)' if jit else 'off (auto on a CPU-only machine)'}")
    for model_name, threads, best in results:
        if model_name != "cnn":
            continue
        s = best["strata"]["images_per_s"]
        missed = [f"s/{short[k]} >= {goal} ({s / best[k]['images_per_s']:.2f})" for k, goal in (("tf", 3), ("torch", 2))
                  if k in best and s / best[k]["images_per_s"] < goal]
        if missed:
            explain_cnn(binary, threads, args, best["strata"], found, missed)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
