#!/usr/bin/env python3
"""Synchronous training across processes: MultiWorkerMirroredStrategy against TensorFlow's own and PyTorch 2 DDP.

    .venv-peers/bin/peer-python bench/multiworker_bench.py [--binary build/bench/distribute_bench]
        [--strata build/strata] [--steps 200] [--rounds 2] [--time-limit 900] [--no-slow-link] [--no-tf] [--no-torch]

Trains the Keras tutorial CNN on Fashion-MNIST with Adam, global batch 128, on 2 worker processes of 1 thread each
(127.0.0.1), and reports the job's images/s over --steps global steps after as many warm-up steps (--steps 0: an
epoch of 468 steps after a warm-up epoch), the same on every side:
  - strata gloo: `strata launch --workers 2 -- distribute_bench --strategy multi_worker_mirrored` (TF_CONFIG,
    the coordination service, gradients all-reduced on Gloo's TCP transport), with the default buckets (25 MiB:
    the CNN's gradients are one bucket) and with 256 KiB buckets that start while backward runs;
    and with steps_per_execution 8 (Keras's knob: 8 steps per hand-off to the replicas and per log; the job's
    metric states ride with the gradients either way, so the two rows differ little now);
  - strata mpi: the same under `mpirun -np 2` (Open MPI: shared memory between the processes);
  - TensorFlow: tf.distribute.MultiWorkerMirroredStrategy (ring collectives over gRPC) in 2 processes of this
    script, each with its TF_CONFIG (127.0.0.1, ports the OS picked), on tf.data as models_bench.py (global batch
    128, the data sharded by element: each worker's replica trains 64 images a step). Keras 3's fit does not run
    under this strategy (keras-team/keras#20585), so it is TensorFlow's custom training loop for it, with the Keras
    model, Adam and accuracy metric (tf_worker says how); threads intra-op 1, inter-op 2 (the collective ops run
    beside the step's);
  - PyTorch 2 DDP: 2 processes of this script, init_process_group("gloo"), DistributedDataParallel, each training
    on its half of every global batch (torch.set_num_threads(1), OpenBLAS pinned to 1);
  - the ceiling: 2 independent 1-thread strata trainers in one process that never communicate (distribute_bench
    --strategy independent), each on half of the data at batch 64: what any 2-worker synchronous strategy at most
    reaches on this machine.
Every configuration runs `--rounds` times, alternating; the best run of each counts (the machine has 2 cores:
single runs vary by tens of percent). Targets: strata gloo >= 0.9 of the ceiling (issue 24) and >= 2x PyTorch DDP
and >= 2x TensorFlow's MultiWorkerMirroredStrategy (issue 39); where the TensorFlow target is missed, the bench
times TensorFlow's step alone (one worker, no strategy, at batch 64: its arithmetic) so the gap to it is measured.
Beside them, the raw Gloo step ceiling: `comm_bench --step-compute-us C --step-bytes B` runs 2 processes that each
repeat C us of arithmetic (the ceiling trainers' compute per step) and a raw Gloo ring all-reduce of the CNN's
B bytes of gradients: what any trainer on Gloo's TCP transport can reach on this machine, and strata gloo's ratio
to it (where that ceiling is below 0.9 of the ceiling, the gloo target is above what this machine allows).
Then (as root; skipped with a message where network namespaces cannot be made, or with --no-slow-link) the 2 gloo
workers run in two network namespaces joined by a veth pair limited to 1 Gbit/s by tc tbf (addresses 10.213.0.1-2,
only inside those namespaces; removed on every path), with one bucket after backward and with 256 KiB buckets that
overlap it, each with float32 gradients and with bf16 gradient compression (--gradient-compression bf16: half the
bytes on the wire), and the bench prints how much of a step's time beyond computing the overlap hides and what
compression gains.
Every child runs in its own session and is killed with what it forked on every path; the run stops at --time-limit.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import peers
from bench_common import Children, find_binary, free_port

DATA = peers.FASHION_MNIST
BATCH = 128
WORKERS = 2


def ddp_worker(rank, world, port, data_dir, steps):
    """One DistributedDataParallel process: its half of each global batch; rank 0 prints the job's images/s over
    `steps` global steps after as many warm-up steps."""
    import datetime

    import torch
    import torch.distributed as dist
    import torch.nn as nn

    peers.pin_torch(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    xs, ys = peers.fashion_mnist(data_dir)
    x = torch.from_numpy(xs).permute(0, 3, 1, 2).contiguous()  # NCHW
    y = torch.from_numpy(ys)
    model = peers.torch_model("cnn")
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    per_worker = BATCH // world

    generator = torch.Generator().manual_seed(1)  # every worker draws the same order

    def global_batches():
        while True:
            perm = torch.randperm(x.shape[0], generator=generator)
            for start in range(0, x.shape[0] - BATCH + 1, BATCH):
                yield perm[start:start + BATCH]

    order = global_batches()

    def epoch(steps):
        n = 0
        for _ in range(steps):
            idx = next(order)[rank * per_worker:(rank + 1) * per_worker]
            xb, yb = x[idx], y[idx]
            opt.zero_grad()
            logits = ddp(xb)
            loss = loss_fn(logits, yb)
            loss.backward()
            opt.step()
            (logits.argmax(1) == yb).sum().item()  # the accuracy metric strata keeps too
            n += xb.shape[0] * world
        return n

    epoch(steps)
    dist.barrier()
    start = time.perf_counter()
    n = epoch(steps)
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"images_per_s": n / seconds, "seconds": seconds}), flush=True)
    dist.destroy_process_group()


def tf_worker(index, data_dir, steps, alone=False):
    """One MultiWorkerMirroredStrategy worker (its TF_CONFIG from the driver); worker 0 prints the job's images/s. With
    `alone`, no strategy: the same loop at batch BATCH / WORKERS in this one process, the arithmetic a worker's replica
    does each step without the collectives.

    Keras 3's fit does not run under MultiWorkerMirroredStrategy (keras-team/keras#20585: its input arrives as
    PerReplica values it cannot convert), so this is TensorFlow's custom training loop for it (the tutorial "Custom
    training loop with Keras and MultiWorkerMirroredStrategy"): the Keras model and Adam, strategy.run of a
    tf.function step on a distributed tf.data iterator, the loss averaged over the global batch
    (tf.nn.compute_average_loss), Keras's optimizer all-reducing the gradients, the accuracy metric kept."""
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    if alone:
        strategy, batch = tf.distribute.get_strategy(), BATCH // WORKERS
    else:
        strategy, batch = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.RING)), BATCH
    import keras
    from models_bench import tf_dataset
    keras.utils.set_random_seed(0)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = tf_dataset("cnn", data_dir, batch).repeat().with_options(options)
    with strategy.scope():
        model = peers.keras_model("cnn")
        optimizer = model.optimizer
        accuracy = keras.metrics.SparseCategoricalAccuracy()
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        iterator = iter(strategy.experimental_distribute_dataset(ds))

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        accuracy.update_state(y, logits)
        return loss

    @tf.function
    def train_step(it):
        x, y = next(it)
        return strategy.reduce("SUM", strategy.run(replica_step, args=(x, y)), axis=None)

    for _ in range(steps):
        loss = train_step(iterator)
    float(loss)
    start = time.perf_counter()
    for _ in range(steps):
        loss = train_step(iterator)
    float(loss)
    seconds = time.perf_counter() - start
    train_accuracy = float(accuracy.result())  # on every worker: reading it is a collective across them
    if index == 0:
        print(json.dumps({"images_per_s": steps * batch / seconds, "seconds": seconds, "loss": float(loss),
                          "accuracy": train_accuracy}), flush=True)


def last_json(text, prefix=""):
    """The last line of `text` that is a JSON object (after `prefix`, e.g. strata launch's "[worker:0] ")."""
    for line in reversed(text.splitlines()):
        line = line[len(prefix):] if prefix and line.startswith(prefix) else line
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON line in:\n{text[-2000:]}")


STEPS = [0]  # --steps, set by main(): each strata run's --steps-per-epoch (0: an epoch of 60000 images)


def bench_args(binary, strategy, replicas, threads, data):
    return [binary, "--strategy", strategy, "--replicas", str(replicas), "--threads", str(threads),
            "--batch", str(BATCH), "--data", data, "--steps-per-epoch", str(STEPS[0])]


def pinned_env(threads):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS=str(threads))


def run_ceiling(children, args):
    (out,) = children.wait_all([children.start(bench_args(args.binary, "independent", WORKERS, WORKERS, args.data),
                                               pinned_env(WORKERS))], "ceiling")
    return last_json(out)["images_per_s"]


def run_gloo(children, args, bucket_kb=0, steps_per_execution=1):
    env = {k: v for k, v in pinned_env(1).items() if k != "TF_CONFIG"}
    extra = ["--bucket-kb", str(bucket_kb)] if bucket_kb else []
    extra += ["--steps-per-execution", str(steps_per_execution)] if steps_per_execution > 1 else []
    (out,) = children.wait_all([children.start(
        [args.strata, "launch", "--workers", str(WORKERS), "--"] +
        bench_args(args.binary, "multi_worker_mirrored", 1, 1, args.data) + extra, env)], "strata gloo")
    return last_json(out, "[worker:0] ")["images_per_s"]


def run_mpi(children, args):
    env = {k: v for k, v in pinned_env(1).items() if not k.startswith(("OMPI_", "PMIX_")) and k != "TF_CONFIG"}
    (out,) = children.wait_all([children.start(
        [args.mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(WORKERS)] +
        bench_args(args.binary, "multi_worker_mirrored", 1, 1, args.data), env)], "strata mpi")
    return last_json(out)["images_per_s"]


class SlowLink:
    """Two network namespaces joined by a veth pair limited to 1 Gbit/s each way (tc tbf), addresses 10.213.0.1 and
    10.213.0.2 living only inside them; removed on exit. Needs root; `ok` is False (with `why`) where it cannot be
    made."""

    def __init__(self):
        tag = str(os.getpid())
        self.ns = [f"strata_mw0_{tag}", f"strata_mw1_{tag}"]
        self.ips = ["10.213.0.1", "10.213.0.2"]
        self.ok, self.why = False, ""
        veth = [f"smw0_{tag}"[:15], f"smw1_{tag}"[:15]]
        steps = [["ip", "netns", "add", self.ns[0]], ["ip", "netns", "add", self.ns[1]],
                 ["ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1]]]
        for i in range(2):
            steps += [["ip", "link", "set", veth[i], "netns", self.ns[i]],
                      ["ip", "-n", self.ns[i], "addr", "add", self.ips[i] + "/24", "dev", veth[i]],
                      ["ip", "-n", self.ns[i], "link", "set", veth[i], "up"],
                      ["ip", "-n", self.ns[i], "link", "set", "lo", "up"],
                      ["tc", "-n", self.ns[i], "qdisc", "add", "dev", veth[i], "root", "tbf", "rate", "1gbit",
                       "burst", "256kb", "latency", "50ms"]]
        for cmd in steps:
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                self.why = f"{' '.join(cmd)}: {r.stderr.strip()}"
                self.remove()
                return
        self.ok = True

    def remove(self):
        for ns in self.ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def run_slow_link(children, args, link, strategy, extra):
    """The 2 workers of `strategy` (TF_CONFIG, gloo), one in each namespace, talking over the 1 Gbit/s link; worker
    0's JSON (images/s of the steady epoch, test accuracy after both)."""
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"{ip}:{port}" for ip, port in zip(link.ips, ports)]}
    procs = []
    for i in range(WORKERS):
        # STRATA_INSECURE=1: the link's addresses exist only inside the two namespaces (no TLS needed to reach them
        # safely; since issue 36 a job beyond loopback refuses to start without TLS or this).
        env = dict(pinned_env(1), STRATA_INSECURE="1",
                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}))
        procs.append(children.start(["ip", "netns", "exec", link.ns[i]] +
                                    bench_args(args.binary, strategy, 1, 1, args.data) + extra, env))
    outs = children.wait_all(procs, f"strata {strategy} over 1 Gbit/s")
    return last_json(outs[0])


def run_gloo_slow_link(children, args, link, bucket_kb=0, compression="none"):
    """The 2 gloo workers, one in each namespace, talking over the 1 Gbit/s link."""
    extra = ["--bucket-kb", str(bucket_kb)] if bucket_kb else []
    extra += ["--gradient-compression", compression] if compression != "none" else []
    return run_slow_link(children, args, link, "multi_worker_mirrored", extra)["images_per_s"]


def run_ddp(children, args):
    port = free_port()
    env = dict(pinned_env(1), GLOO_SOCKET_IFNAME="lo")
    procs = [children.start([args.peers["torch"].python, os.path.abspath(__file__), "--ddp-worker", str(r), "--port",
                             str(port), "--data", args.data, "--steps", str(args.steps)], env)
             for r in range(WORKERS)]
    outs = children.wait_all(procs, "PyTorch DDP")
    return last_json(outs[0])["images_per_s"]


def run_tf(children, args, alone=False):
    """TensorFlow's MultiWorkerMirroredStrategy: WORKERS processes, each with its TF_CONFIG on 127.0.0.1 (ports the OS
    picked); with `alone`, one process without a strategy (what bounds it)."""
    me = [args.peers["tf"].python, os.path.abspath(__file__), "--data", args.data, "--steps", str(args.steps)]
    if alone:
        (out,) = children.wait_all([children.start(me + ["--tf-worker", "0", "--alone"], peers.env(1))],
                                   "TensorFlow alone")
        return last_json(out)["images_per_s"]
    cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(WORKERS)]}
    procs = [children.start(me + ["--tf-worker", str(i)], peers.env(1, TF_CONFIG=json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": i}}))) for i in range(WORKERS)]
    outs = children.wait_all(procs, "TensorFlow MultiWorkerMirroredStrategy")
    return last_json(outs[0])["images_per_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--binary", default=None, help="distribute_bench")
    parser.add_argument("--strata", default=None, help="the strata CLI (for strata launch)")
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each configuration; the best counts")
    parser.add_argument("--time-limit", type=float, default=900, help="seconds for the whole run")
    parser.add_argument("--no-slow-link", action="store_true", help="skip the 1 Gbit/s network-namespace runs")
    parser.add_argument("--local-sgd-only", action="store_true",
                        help="only the 1 Gbit/s comparison of LocalSGDStrategy with MultiWorkerMirroredStrategy")
    parser.add_argument("--steps", type=int, default=200,
                        help="timed global steps per side, after as many warm-up steps (0: an epoch of 468 steps)")
    parser.add_argument("--ddp-worker", type=int, metavar="RANK", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tf-worker", type=int, metavar="INDEX", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--alone", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    peers.add_arguments(parser)
    args = parser.parse_args()
    STEPS[0] = args.steps
    args.steps = args.steps or 60000 // BATCH
    if args.ddp_worker is not None:
        ddp_worker(args.ddp_worker, WORKERS, args.port, args.data, args.steps)
        return 0
    if args.tf_worker is not None:
        tf_worker(args.tf_worker, args.data, args.steps, alone=args.alone)
        return 0
    args.binary = find_binary("distribute_bench", args.binary)
    if args.local_sgd_only:
        local_sgd_slow_link(args)
        return 0
    if args.strata is None:
        args.strata = os.path.join(os.path.dirname(os.path.dirname(args.binary)), "strata")
    if not os.path.exists(args.strata):
        sys.exit(f"multiworker_bench.py: {args.strata} not found; build the strata target or pass --strata")
    # The default bytes_per_pack (25 MiB) makes the CNN's 1.4 MB of gradients one bucket, all-reduced after
    # backward; 256 KiB buckets start during backward (the overlap), at the cost of more collectives.
    args.peers = peers.find(args)
    configs = {"ceiling": run_ceiling, "strata gloo": run_gloo,
               "strata gloo, 256 KiB buckets": lambda c, a: run_gloo(c, a, bucket_kb=256),
               "strata gloo, 8 steps/execution": lambda c, a: run_gloo(c, a, steps_per_execution=8)}
    if args.peers["tf"].ok:
        configs["TensorFlow MWMS"] = run_tf
    if args.peers["torch"].ok:
        configs["PyTorch 2 DDP"] = run_ddp
    if shutil.which(args.mpirun):
        configs["strata mpi"] = run_mpi
    else:
        print(f"# {args.mpirun} not found (openmpi-bin): no strata mpi row")
    children = Children(time.monotonic() + args.time_limit)
    best = {}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("multiworker_bench.py: terminated"))  # so that `finally` runs
    try:
        for _ in range(args.rounds):
            for name, run in configs.items():
                best[name] = max(best.get(name, 0.0), run(children, args))
    except RuntimeError as e:
        sys.exit(f"multiworker_bench.py: {e}")
    finally:
        children.kill_all()

    print(f"# CNN on Fashion-MNIST, {WORKERS} workers x 1 thread, global batch {BATCH}, Adam; {args.steps} timed "
          f"steps after {args.steps} warm-up steps; best of {args.rounds}")
    for name in configs:
        print(f"{name:<30} {best[name]:10.0f} images/s")
    ceiling, ddp, tf_mw = best["ceiling"], best.get("PyTorch 2 DDP"), best.get("TensorFlow MWMS")
    for name in [n for n in configs if n.startswith("strata")]:
        print(f"{name} / ceiling: {best[name] / ceiling:.2f} (target >= 0.9); / TensorFlow MWMS: "
              f"{peers.ratio(best[name], tf_mw)} (target >= 2); / PyTorch 2 DDP: {peers.ratio(best[name], ddp)} "
              f"(target >= 2)")
    print(f"PyTorch 2 DDP / ceiling: {peers.ratio(ddp, ceiling)}; TensorFlow MWMS / ceiling: "
          f"{peers.ratio(tf_mw, ceiling)}")
    for name in ("TensorFlow MWMS", "PyTorch 2 DDP"):
        if name not in configs:
            print(args.peers["tf" if name.startswith("TensorFlow") else "torch"].skip_line())
    if tf_mw and best["strata gloo"] / tf_mw < 2:
        tf_bound(args, best["strata gloo"], tf_mw, ceiling)
    gloo_step_ceiling(args, ceiling, best["strata gloo"])
    if not args.no_slow_link:
        slow_link(args, ceiling)
        local_sgd_slow_link(args)
    return 0


def tf_bound(args, strata_gloo, tf_mw, ceiling):
    """Where strata gloo is under 2x TensorFlow's MWMS: TensorFlow's own step without the strategy (one process, batch
    64, 1 thread), the most its 2 workers could reach on 2 cores being twice that."""
    children = Children(time.monotonic() + args.time_limit)
    try:
        alone = run_tf(children, args, alone=True)
    except RuntimeError as e:
        print(f"# TensorFlow alone: failed: {e}")
        return
    finally:
        children.kill_all()
    print(f"strata gloo / TensorFlow MWMS is {strata_gloo / tf_mw:.2f}, under 2; what bounds it: TensorFlow's step alone "
          f"(its custom loop, batch {BATCH // WORKERS}, 1 thread, no strategy) runs {alone:.0f} images/s, so its 2 workers on "
          f"2 cores reach at most {2 * alone:.0f}: MWMS keeps {tf_mw / (2 * alone):.2f} of that; strata gloo keeps "
          f"{strata_gloo / ceiling:.2f} of its ceiling; 2x TensorFlow's MWMS would be {2 * tf_mw / ceiling:.2f} of "
          f"strata's ceiling")


# The CNN's gradients: conv 3x3x1x32 + 32, dense (13*13*32)x64 + 64, dense 64x10 + 10 float32 values.
GRADIENT_BYTES = 4 * (3 * 3 * 32 + 32 + 13 * 13 * 32 * 64 + 64 + 64 * 10 + 10)


def gloo_step_ceiling(args, ceiling, strata_gloo):
    """The raw Gloo step ceiling (see the module docstring): best of --rounds runs of comm_bench's step mode."""
    comm_bench = os.path.join(os.path.dirname(args.binary), "comm_bench")
    if not os.path.exists(comm_bench):
        print(f"# raw Gloo step ceiling: skipped, {comm_bench} not built")
        return
    compute_us = BATCH / ceiling * 1e6  # a step of either ceiling trainer (batch BATCH / WORKERS each)
    children = Children(time.monotonic() + args.time_limit)
    best_step = None
    try:
        for _ in range(args.rounds):
            (out,) = children.wait_all([children.start(
                [comm_bench, "--procs", str(WORKERS), "--step-compute-us", f"{compute_us:.1f}", "--step-bytes",
                 str(GRADIENT_BYTES), "--steps", "300", "--json"], pinned_env(1))], "raw Gloo step ceiling")
            step = last_json(out)["step_s"]
            best_step = step if best_step is None else min(best_step, step)
    except RuntimeError as e:
        print(f"# raw Gloo step ceiling: failed: {e}")
        return
    finally:
        children.kill_all()
    gloo = BATCH / best_step
    print(f"raw Gloo step ceiling ({compute_us:.0f} us of compute + a raw Gloo all-reduce of "
          f"{GRADIENT_BYTES / 1e6:.2f} MB per step): {gloo:.0f} images/s = {gloo / ceiling:.2f} of the ceiling; "
          f"strata gloo / raw Gloo step ceiling: {strata_gloo / gloo:.2f}")
    if gloo / ceiling < 0.9:
        print("  -> on this machine Gloo's TCP transport alone keeps any trainer below the 0.9 target; strata mpi "
              "shows what the same strategy reaches on a transport that allows it")


def slow_link(args, ceiling):
    """The gloo workers over a 1 Gbit/s link, with one bucket after backward and with 256 KiB buckets overlapping
    it: how much of the communication time the overlap hides; each also with bf16 gradient compression (half the
    bytes on the wire): what that gains where the link, not the cores, bounds a step."""
    link = SlowLink()
    if not link.ok:
        print(f"# 1 Gbit/s link: skipped, network namespaces cannot be made here ({link.why})")
        return
    children = Children(time.monotonic() + args.time_limit)
    best = {}
    try:
        for _ in range(args.rounds):
            for name, kb, compression in (("one bucket", 0, "none"), ("256 KiB buckets", 256, "none"),
                                          ("one bucket, bf16", 0, "bf16"), ("256 KiB buckets, bf16", 256, "bf16")):
                best[name] = max(best.get(name, 0.0), run_gloo_slow_link(children, args, link, kb, compression))
    except RuntimeError as e:
        print(f"# 1 Gbit/s link: failed: {e}")
        return
    finally:
        children.kill_all()
        link.remove()
    print(f"# strata gloo, 2 workers in 2 network namespaces over a veth link limited to 1 Gbit/s (tc tbf)")
    compute = BATCH / ceiling  # seconds a step of either ceiling trainer takes (batch BATCH / WORKERS each)
    exposed = {}
    for name, ips in best.items():
        step = BATCH / ips
        exposed[name] = max(step - compute, 0.0)
        print(f"{name:<22} {ips:10.0f} images/s  {step * 1e3:6.2f} ms/step  "
              f"{exposed[name] * 1e3:6.2f} ms/step beyond computing")
    if exposed["one bucket"] > 0:
        hidden = 1 - exposed["256 KiB buckets"] / exposed["one bucket"]
        print(f"overlap hides {hidden * 100:.0f}% of the time a step spends beyond computing")
    for name in ("one bucket", "256 KiB buckets"):
        print(f"{name}: bf16 compression / float32: {best[name + ', bf16'] / best[name]:.2f} images/s")


def local_sgd_slow_link(args):
    """LocalSGDStrategy beside MultiWorkerMirroredStrategy over the 1 Gbit/s link: H local steps between weight
    averages (H = 1 trains as MultiWorkerMirroredStrategy does, averaging weights instead of gradients), images/s of
    the second epoch and test accuracy after both (Adam: each worker keeps its own slots)."""
    link = SlowLink()
    if not link.ok:
        print(f"# LocalSGD over 1 Gbit/s: skipped, network namespaces cannot be made here ({link.why})")
        return
    runs = [("MultiWorkerMirrored", "multi_worker_mirrored", [])]
    runs += [(f"LocalSGD H={h}", "local_sgd", ["--sync-every", str(h)]) for h in (1, 8, 32)]
    runs += [("LocalSGD H=8, DiLoCo outer step", "local_sgd", ["--sync-every", "8", "--outer-step", "nesterov"])]
    children = Children(time.monotonic() + args.time_limit)
    best = {}
    try:
        for _ in range(args.rounds):
            for name, strategy, extra in runs:
                out = run_slow_link(children, args, link, strategy, extra + ["--epochs", "1"])
                if name not in best or out["images_per_s"] > best[name]["images_per_s"]:
                    best[name] = out
    except RuntimeError as e:
        print(f"# LocalSGD over 1 Gbit/s: failed: {e}")
        return
    finally:
        children.kill_all()
        link.remove()
    print(f"# 2 workers x 1 thread in 2 network namespaces over a veth link limited to 1 Gbit/s (tc tbf); CNN, Adam, "
          f"global batch {BATCH}; 2 epochs{f' of {STEPS[0]} steps' if STEPS[0] else ''} (images/s of the second); "
          f"best of {args.rounds}")
    base = best["MultiWorkerMirrored"]["images_per_s"]
    for name, _, _ in runs:
        out = best[name]
        print(f"{name:<32} {out['images_per_s']:10.0f} images/s ({out['images_per_s'] / base:.2f}x)  "
              f"test accuracy {out['test_accuracy']:.4f}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
