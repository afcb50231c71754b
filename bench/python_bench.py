#!/usr/bin/env python3
"""The Python binding's overhead: the tutorial CNN's training epoch from Python against the same epoch from the CLI.

    .venv-peers/bin/peer-python bench/python_bench.py [--strata build/strata] [--module-dir build/python]
        [--epochs 3] [--rounds 2] [--time-limit 900]

Both sides train configs/fashion_mnist_cnn.yaml's model (Conv2D 32 relu, MaxPooling2D, Flatten, Dense 64 relu,
Dense 10; Adam 1e-3, sparse crossentropy from logits, accuracy, batch 64, a full shuffle each epoch) on Fashion-MNIST
under MirroredStrategy with two CPU replicas, in a fresh process each run:
  - CLI: `strata train configs/fashion_mnist_cnn.yaml --strategy mirrored --replicas 2 --epochs E` (the IDX files
    through strata's input pipeline, scaled there);
  - Python: strata.Sequential in `with strata.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():`, then
    fit(x_train, y_train, epochs=E, batch_size=64) on float32 numpy arrays (x / 255, as the Keras tutorial writes it),
    then evaluate on the test arrays: examples/python/keras_cnn.py's program.
Each side's epoch is its marginal one: (wall time of an E-epoch run - that of a 1-epoch run) / (E - 1), so start-up,
reading the data and the test evaluation cancel out. The runs alternate sides; the best of --rounds counts (the
machine has 2 cores: single runs vary by several percent). Target: the Python epoch within 5% of the CLI's (issue 41).
Every child runs in its own session and is killed with what it forked on every path; the run stops at --time-limit.
"""
import argparse
import os
import sys
import time

from bench_common import REPO, Children

PYTHON_RUN = r"""
import gzip, os, sys
import numpy as np
import strata
from strata import layers
epochs = int(sys.argv[1])
def read(name, header):
    with gzip.open(os.path.join("/usr/share/datasets/fashion-mnist", name), "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=header)
x_train = (read("train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28, 1) / 255.0).astype(np.float32)
y_train = read("train-labels-idx1-ubyte.gz", 8)
x_test = (read("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28, 1) / 255.0).astype(np.float32)
y_test = read("t10k-labels-idx1-ubyte.gz", 8)
strata.utils.set_random_seed(1)
with strata.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
    model = strata.Sequential([layers.Input((28, 28, 1)), layers.Conv2D(32, 3, activation="relu"),
                               layers.MaxPooling2D(2), layers.Flatten(), layers.Dense(64, activation="relu"),
                               layers.Dense(10)])
    model.compile(optimizer=strata.optimizers.Adam(learning_rate=1e-3),
                  loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(x_train, y_train, epochs=epochs, batch_size=64, verbose=0)
loss, accuracy = model.evaluate(x_test, y_test)
print(f"test accuracy {accuracy:.4f}")
"""


def timed(children, cmd, env, what):
    start = time.perf_counter()
    (out,) = children.wait_all([children.start(cmd, env)], what)
    seconds = time.perf_counter() - start
    accuracy = [line for line in out.splitlines() if "test accuracy" in line]
    return seconds, accuracy[-1].split("test accuracy")[-1].strip() if accuracy else "?"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--strata", default=os.path.join(REPO, "build", "strata"))
    parser.add_argument("--module-dir", default=os.path.join(REPO, "build", "python"),
                        help="the directory holding the strata package (build/python, or '' for an installed one)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of the long run (>= 2)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--time-limit", type=float, default=900)
    args = parser.parse_args()
    if args.epochs < 2:
        sys.exit("python_bench.py: --epochs must be >= 2 (the marginal epoch is the long run minus the short one)")
    if not os.path.exists(args.strata):
        sys.exit(f"python_bench.py: {args.strata} not found; build the strata target or pass --strata")
    env = dict(os.environ)
    if args.module_dir:
        if not os.path.isdir(os.path.join(args.module_dir, "strata")):
            sys.exit(f"python_bench.py: no strata package under {args.module_dir}; configure with -DSTRATA_PYTHON=ON "
                     "(nanobind in this Python) and build the _strata target, or pip install . and pass "
                     "--module-dir ''")
        env["PYTHONPATH"] = args.module_dir + os.pathsep + env.get("PYTHONPATH", "")
    job = os.path.join(REPO, "configs", "fashion_mnist_cnn.yaml")
    sides = {
        "CLI": lambda e: [args.strata, "train", job, "--strategy", "mirrored", "--replicas", "2", "--epochs", str(e)],
        "Python": lambda e: [sys.executable, "-c", PYTHON_RUN, str(e)],
    }
    children = Children(time.monotonic() + args.time_limit)
    best, accuracy = {}, {}
    try:
        for _ in range(args.rounds):
            for name, command in sides.items():
                short, _ = timed(children, command(1), env, f"{name}, 1 epoch")
                long, accuracy[name] = timed(children, command(args.epochs), env, f"{name}, {args.epochs} epochs")
                epoch = (long - short) / (args.epochs - 1)
                print(f"# {name}: 1 epoch {short:.2f} s, {args.epochs} epochs {long:.2f} s -> {epoch:.2f} s an epoch",
                      flush=True)
                best[name] = min(best.get(name, float("inf")), epoch)
    except RuntimeError as e:
        sys.exit(f"python_bench.py: {e}")
    finally:
        children.kill_all()
    print(f"# the tutorial CNN, MirroredStrategy with 2 CPU replicas, batch 64; marginal epoch, best of {args.rounds}")
    for name in sides:
        print(f"{name:<8} {best[name]:6.2f} s an epoch ({60000 / best[name]:7.0f} images/s), "
              f"test accuracy after {args.epochs} epochs {accuracy[name]}")
    ratio = best["Python"] / best["CLI"]
    print(f"Python / CLI epoch time: {ratio:.3f} (target <= 1.05: {'met' if ratio <= 1.05 else 'not met'})")


if __name__ == "__main__":
    main()
