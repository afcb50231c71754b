#!/usr/bin/python3
"""Co-located workers as a user starts them: the default thread count against the best hand-set one.

    /usr/bin/python3 bench/launch_threads_bench.py [--strata build/strata] [--epochs 1] [--time-limit 900]

Runs the README's 2-worker MultiWorkerMirrored job on Fashion-MNIST three ways a user starts it on one machine,
each as written (no thread setting), and again with STRATA_NUM_THREADS set by hand to every count from 1 to the
usable cores; the fastest hand-set run is the tuned one. It times the whole process (start to exit: set-up, training, the test pass), as a user waits for it:
  - `strata launch --workers 2 -- strata train configs/fashion_mnist_cnn.yaml --strategy multi_worker_mirrored`;
  - two processes with TensorFlow's TF_CONFIG on 127.0.0.1 (ports picked free);
  - `mpirun --allow-run-as-root --bind-to none -np 2 strata train ...` (skipped without mpirun).
It prints each run's seconds and the strategy line's thread reason, and for each way the ratio default / tuned.
Target (issue 34): at most 1.2x. Every child runs in its own session and is killed with what it forked on every
path; the run stops at --time-limit.
"""
import argparse
import json
import os
import re
import shutil
import sys
import time

from bench_common import REPO, Children, free_port

JOB = os.path.join(REPO, "configs", "fashion_mnist_cnn.yaml")


def usable_cores():
    return len(os.sched_getaffinity(0))


def base_env(threads):
    env = {k: v for k, v in os.environ.items() if k not in ("STRATA_NUM_THREADS", "TF_CONFIG")}
    if threads is not None:
        env["STRATA_NUM_THREADS"] = str(threads)
    return env


def train_args(strata, epochs):
    return [strata, "train", JOB, "--strategy", "multi_worker_mirrored", "--epochs", str(epochs)]


def run_launch(children, strata, epochs, threads):
    p = children.start([strata, "launch", "--workers", "2", "--"] + train_args(strata, epochs), env=base_env(threads))
    return children.wait_all([p], "strata launch")[0]


def run_tf_config(children, strata, epochs, threads):
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index in range(2):
        env = base_env(threads)
        env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(children.start(train_args(strata, epochs), env=env))
    return "".join(children.wait_all(procs, "TF_CONFIG workers"))


def run_mpirun(children, strata, epochs, threads):
    env = base_env(threads)
    args = ["mpirun", "--allow-run-as-root", "--bind-to", "none", "-np", "2"]
    if threads is not None:
        args += ["-x", "STRATA_NUM_THREADS"]
    p = children.start(args + train_args(strata, epochs), env=env)
    return children.wait_all([p], "mpirun")[0]


def timed(children, runner, strata, epochs, threads):
    start = time.monotonic()
    out = runner(children, strata, epochs, threads)
    seconds = time.monotonic() - start
    reason = re.search(r"strategy: .*?; (\d+ threads?: [^\n]*)", out)
    if not re.search(r"test loss [0-9.]+ - test accuracy [0-9.]+", out):
        raise RuntimeError(f"no test line in:\n{out[-2000:]}")
    return seconds, reason.group(1) if reason else "?"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata", default=os.path.join(os.environ.get("STRATA_BUILD_DIR", os.path.join(REPO, "build")),
                                                         "strata"))
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=900)
    args = parser.parse_args()
    if not os.path.exists(args.strata):
        sys.exit(f"{args.strata} not found; build it (scripts/setup.sh --build) or pass --strata")
    ways = [("strata launch --workers 2", run_launch), ("2 TF_CONFIG processes", run_tf_config)]
    if shutil.which("mpirun"):
        ways.append(("mpirun --bind-to none -np 2", run_mpirun))
    else:
        print("mpirun: not installed (openmpi-bin); skipped")
    cores = usable_cores()
    print(f"2 workers, Fashion-MNIST CNN, {args.epochs} epoch(s), whole process; {cores} usable cores here")
    children = Children(time.monotonic() + args.time_limit)
    failed = False
    try:
        for name, runner in ways:
            default_s, reason = timed(children, runner, args.strata, args.epochs, None)
            print(f"  {name}, as written: {default_s:6.1f} s   ({reason})", flush=True)
            tuned = []
            for threads in range(1, cores + 1):
                s, _ = timed(children, runner, args.strata, args.epochs, threads)
                print(f"  {name}, STRATA_NUM_THREADS={threads}: {s:6.1f} s", flush=True)
                tuned.append(s)
            ratio = default_s / min(tuned)
            verdict = "meets" if ratio <= 1.2 else "MISSES"
            failed = failed or ratio > 1.2
            print(f"{name}: as written / best hand-set = {ratio:.2f}x ({verdict} the 1.2x target)", flush=True)
    finally:
        children.kill_all()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
