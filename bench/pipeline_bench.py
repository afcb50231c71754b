#!/usr/bin/env python3
"""Pipeline parallelism (issue 19): strata's stages as threads against one device, and the LSTM stack and the MLP
against TensorFlow and PyTorch 2.

    .venv-peers/bin/peer-python bench/pipeline_bench.py [--build-dir build] [--models mlp,lstm] [--mlp-steps 8]
        [--lstm-steps 15] [--micro-batches 2,4,8] [--lstm-stages 2,4] [--threads 2] [--no-tf] [--no-torch] [--quick]

Runs build/bench/pipeline_bench (it builds nothing) for
1. the MLP, 8 Dense(2048, relu) + Dense(10) on 2048 features (34M weights, far over any cache), batch 256;
2. the Fashion-MNIST LSTM stack (configs/fashion_mnist_lstm.yaml: LSTM 64 x4 + Dense(10), 28 steps x 28 features),
   batch 128;
each on one device with --threads intra-op threads (the plain GradientTape loop) and cut into S stages run as threads
(S = 2 on 2 cores: one core per stage; the LSTM also S = 4, two stages per core) for every schedule (GPipe, 1F1B,
ZB-H1, interleaved 1F1B with 2 chunks) and micro-batch count M: step time, the measured bubble beside simulate()'s
and the bound (S - 1) / (M + S - 1). Side by side in the same run, each in a child process with --threads threads
pinned before it loads (peers.py), the peers train the same models on one device (neither pipelines a CPU model):
  TensorFlow  Keras 3: the LSTM as four keras.layers.LSTM(64) (the first three return_sequences) + Dense(10), the MLP
              as Dense(relu) layers; compiled with SGD(0.01), SparseCategoricalCrossentropy(from_logits) and Keras's
              default jit_compile="auto" (off on a CPU-only machine); one step = train_on_batch (Keras's compiled
              train_step: forward, loss, gradients, SGD);
  PyTorch 2   the LSTM as four nn.LSTM(batch_first) layers + Linear, the MLP as Linear/ReLU; one step = forward,
              CrossEntropyLoss, backward, SGD.
Every step time is the best of the timed steps after warm-up (2 cores shared with other work: single steps vary 3x);
each peer runs twice, before and after strata's run of the same model, and its best step counts. The data is random,
drawn once from a fixed seed.
The summary gives, per model, the best pipeline per stage count against one device, and strata against PyTorch.
Every child runs in its own session and is killed with what it forked on every path. Thread-safety: a program.
"""
import argparse
import json
import os
import statistics
import sys
import time

import peers
from bench_common import REPO, Children

LSTM_UNITS = 64


def torch_worker(model_name, threads, batch, warmup, steps):
    """Prints the best step time of PyTorch training `model_name` on random data as JSON."""
    import torch
    import torch.nn as nn

    peers.pin_torch(threads)
    torch.manual_seed(1)
    if model_name == "lstm":
        class Stack(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstms = nn.ModuleList([nn.LSTM(28 if i == 0 else LSTM_UNITS, LSTM_UNITS, batch_first=True)
                                            for i in range(4)])
                self.head = nn.Linear(LSTM_UNITS, 10)

            def forward(self, x):
                for lstm in self.lstms:
                    x, _ = lstm(x)
                return self.head(x[:, -1])  # the last LSTM passes on only its final state

        model = Stack()
        x = torch.rand(batch, 28, 28) * 2 - 1
    else:
        layers = []
        for _ in range(8):
            layers += [nn.Linear(2048, 2048), nn.ReLU()]
        model = nn.Sequential(*layers, nn.Linear(2048, 10))
        x = torch.rand(batch, 2048) * 2 - 1
    y = torch.randint(0, 10, (batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for k in range(warmup + steps):
        start = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        if k >= warmup:
            times.append(time.perf_counter() - start)
    print(json.dumps({"step_s": min(times), "median_s": statistics.median(times), "version": torch.__version__,
                      "threads": torch.get_num_threads()}))


def tf_worker(model_name, threads, batch, warmup, steps):
    """Prints the best step time of Keras training `model_name` on random data (train_on_batch) as JSON."""
    peers.pin_tf(threads)
    import keras
    import numpy as np
    import tensorflow as tf

    keras.utils.set_random_seed(1)
    rng = np.random.default_rng(1)
    if model_name == "lstm":
        layers = [keras.Input((28, 28))]
        layers += [keras.layers.LSTM(LSTM_UNITS, return_sequences=i < 3) for i in range(4)]
        x = rng.uniform(-1, 1, (batch, 28, 28)).astype(np.float32)
    else:
        layers = [keras.Input((2048,))] + [keras.layers.Dense(2048, activation="relu") for _ in range(8)]
        x = rng.uniform(-1, 1, (batch, 2048)).astype(np.float32)
    model = keras.Sequential(layers + [keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    y = rng.integers(0, 10, (batch,)).astype(np.int64)
    x, y = tf.constant(x), tf.constant(y)
    times = []
    for k in range(warmup + steps):
        start = time.perf_counter()
        model.train_on_batch(x, y)
        if k >= warmup:
            times.append(time.perf_counter() - start)
    print(json.dumps({"step_s": min(times), "median_s": statistics.median(times), "version": tf.__version__,
                      "threads": threads}))


def pinned_env(threads):
    return peers.env(threads)


def find_pipeline_bench(build_dir):
    for base in (os.getcwd(), REPO):
        path = os.path.join(base, build_dir, "bench", "pipeline_bench")
        if os.path.exists(path):
            return path
    sys.exit(f"pipeline_bench not found under {build_dir}/bench; build it "
             f"(cmake --build {build_dir} --target pipeline_bench) or pass --build-dir")


def last_json(out):
    return json.loads(out.strip().splitlines()[-1])


def run_strata(children, binary, model_name, args, steps, stages):
    cmd = [binary, "--model", model_name, "--steps", str(steps), "--warmup", str(args.warmup),
           "--micro-batches", args.micro_batches, "--stages", stages, "--threads", str(args.threads)]
    print("$ " + " ".join(cmd), flush=True)
    (out,) = children.wait_all([children.start(cmd, pinned_env(args.threads))], f"pipeline_bench {model_name}")
    print("\n".join(line for line in out.strip().splitlines()[:-1]), flush=True)
    return last_json(out)


def run_peer(children, peer, model_name, args, batch, steps):
    cmd = [peer.python, os.path.abspath(__file__), f"--{peer.key}-worker", model_name, "--threads", str(args.threads),
           "--batch", str(batch), "--warmup", str(args.warmup), "--peer-steps", str(steps)]
    print(f"$ OMP_NUM_THREADS={args.threads} OPENBLAS_NUM_THREADS=1 " + " ".join(cmd), flush=True)
    (out,) = children.wait_all([children.start(cmd, pinned_env(args.threads))], f"{peer.label} {model_name}")
    return last_json(out)


def summarize(name, r, peer_results):
    one = r["one_device"]["step_s"]
    batch = r["batch"]
    print(f"{name}, batch {batch}: one device with {r['threads']} threads {one * 1e3:.1f} ms/step "
          f"({batch / one:.1f} examples/s)")
    for stages in sorted({p["stages"] for p in r["pipelines"]}):
        rows = [p for p in r["pipelines"] if p["stages"] == stages]
        best = min(rows, key=lambda p: p["step_s"])
        print(f"  {stages} stages, best: {best['schedule']} M={best['micro_batches']} "
              f"{best['step_s'] * 1e3:.1f} ms/step -> pipeline/one-device speed {one / best['step_s']:.2f}x")
        for schedule in dict.fromkeys(p["schedule"] for p in rows):
            line = ", ".join(f"M={p['micro_batches']} {one / p['step_s']:.2f}x bubble {p['bubble']:.2f}"
                             f" (sim {p['simulated']:.2f}, bound {p['bound']:.2f})"
                             for p in rows if p["schedule"] == schedule)
            print(f"    {schedule:<12} {line}")
    for label, result in peer_results.items():
        t = result["step_s"]
        print(f"  {label} ({result['threads']} threads): {t * 1e3:.1f} ms/step; strata one device / {label} speed "
              f"{t / one:.2f}x", end="")
        if r["pipelines"]:
            best = min(r["pipelines"], key=lambda p: p["step_s"])
            print(f", strata's best pipeline ({best['stages']} stages {best['schedule']} M={best['micro_batches']}) / "
                  f"{label} {t / best['step_s']:.2f}x")
        else:
            print()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="build", help="where bench/pipeline_bench is (default: build)")
    parser.add_argument("--models", default="mlp,lstm")
    parser.add_argument("--mlp-steps", type=int, default=8, help="timed steps per configuration (after --warmup)")
    parser.add_argument("--lstm-steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--micro-batches", default="2,4,8")
    parser.add_argument("--lstm-stages", default="2,4", help="stage counts for the LSTM (the MLP runs 2)")
    parser.add_argument("--threads", type=int, default=2, help="the one device's threads, PyTorch's too")
    parser.add_argument("--skip-torch", action="store_true", help="the same as --no-torch")
    parser.add_argument("--quick", action="store_true", help="2 timed steps each, M in {2, 8}, the LSTM on 2 stages")
    parser.add_argument("--time-limit", type=float, default=900)
    parser.add_argument("--torch-worker", metavar="MODEL", help=argparse.SUPPRESS)
    parser.add_argument("--tf-worker", metavar="MODEL", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--peer-steps", type=int, help=argparse.SUPPRESS)
    peers.add_arguments(parser)
    args = parser.parse_args()
    if args.torch_worker:
        torch_worker(args.torch_worker, args.threads, args.batch, args.warmup, args.peer_steps)
        return
    if args.tf_worker:
        tf_worker(args.tf_worker, args.threads, args.batch, args.warmup, args.peer_steps)
        return
    args.no_torch = args.no_torch or args.skip_torch
    if args.quick:
        args.mlp_steps, args.lstm_steps, args.micro_batches, args.lstm_stages = 2, 2, "2,8", "2"
    binary = find_pipeline_bench(args.build_dir)
    found = [p for p in peers.find(args).values() if p.ok]
    children = Children(time.monotonic() + args.time_limit)
    results = {}
    started = time.monotonic()
    try:
        for model_name in args.models.split(","):
            steps = args.mlp_steps if model_name == "mlp" else args.lstm_steps
            stages = "2" if model_name == "mlp" else args.lstm_stages
            print(f"== {model_name}", flush=True)
            batch = 256 if model_name == "mlp" else 128
            peer_steps = max(steps, 3) * (1 if model_name == "mlp" else 3)  # its LSTM step is short: more of them
            before = {p.label: run_peer(children, p, model_name, args, batch, peer_steps) for p in found}
            r = run_strata(children, binary, model_name, args, steps, stages)
            best = {}
            for p in found:
                again = run_peer(children, p, model_name, args, batch, peer_steps)
                t = best[p.label] = min(before[p.label], again, key=lambda x: x["step_s"])
                print(f"# {p.label}, {t['threads']} threads: step {t['step_s'] * 1e3:.1f} ms, "
                      f"{r['batch'] / t['step_s']:.1f} examples/s", flush=True)
            results[model_name] = (r, best)
            print(flush=True)
    finally:
        children.kill_all()
    print(f"== summary (speed ratios: above 1 means the first is faster; {time.monotonic() - started:.0f} s in all)")
    for model_name, (r, best) in results.items():
        summarize("MLP 8x2048" if model_name == "mlp" else "LSTM 64x4 (Fashion-MNIST rows)", r, best)


if __name__ == "__main__":
    main()
