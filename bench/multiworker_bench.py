#!/usr/bin/python3
"""Synchronous training across processes: MultiWorkerMirroredStrategy against PyTorch DistributedDataParallel.

    /usr/bin/python3 bench/multiworker_bench.py [--binary build/bench/distribute_bench] [--strata build/strata]
                                                [--rounds 2] [--time-limit 900]

Trains the Keras tutorial CNN on Fashion-MNIST with Adam, global batch 128, on 2 worker processes of 1 thread each
(127.0.0.1), and reports the job's images/s over one steady-state epoch (60000 images) after a warm-up epoch:
  - strata gloo: `strata launch --workers 2 -- distribute_bench --strategy multi_worker_mirrored` (TF_CONFIG,
    the coordination service, gradients all-reduced on Gloo's TCP transport), with the default buckets (25 MiB:
    the CNN's gradients are one bucket) and with 256 KiB buckets that start while backward runs;
    and with steps_per_execution 8 (Keras's knob: 8 steps per hand-off to the replicas and per log; the job's
    metric states ride with the gradients either way, so the two rows differ little now);
  - strata mpi: the same under `mpirun -np 2` (Open MPI: shared memory between the processes);
  - PyTorch DDP: 2 processes of this script, init_process_group("gloo"), DistributedDataParallel, each training on
    its half of every global batch (torch.set_num_threads(1), OpenBLAS pinned to 1);
  - the ceiling: 2 independent 1-thread strata trainers in one process that never communicate (distribute_bench
    --strategy independent), each on half of the data at batch 64: what any 2-worker synchronous strategy at most
    reaches on this machine.
Every configuration runs `--rounds` times, alternating; the best run of each counts (the machine has 2 cores:
single runs vary by tens of percent). Targets (issue 24): strata gloo >= 0.9 of the ceiling and >= 2x PyTorch DDP.
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

from bench_common import Children, find_binary, free_port

DATA = "/usr/share/datasets/fashion-mnist"
BATCH = 128
WORKERS = 2


def ddp_worker(rank, world, port, data_dir, warmup_steps=100):
    """One DistributedDataParallel process: its half of each global batch; rank 0 prints the job's images/s."""
    import datetime

    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    from models_bench import read_idx

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    x = torch.from_numpy(read_idx(f"{data_dir}/train-images-idx3-ubyte.gz").astype(np.float32) / 255.0)
    y = torch.from_numpy(read_idx(f"{data_dir}/train-labels-idx1-ubyte.gz").astype(np.int64))
    x = x.reshape(-1, 1, 28, 28)
    model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(5408, 64), nn.ReLU(), nn.Linear(64, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    per_worker = BATCH // world

    def epoch(steps=None):
        generator = torch.Generator().manual_seed(1)  # every worker draws the same order
        perm = torch.randperm(x.shape[0], generator=generator)
        n = 0
        for i, start in enumerate(range(0, x.shape[0], BATCH)):
            if steps is not None and i >= steps:
                break
            idx = perm[start:start + BATCH][rank * per_worker:(rank + 1) * per_worker]
            xb, yb = x[idx], y[idx]
            opt.zero_grad()
            logits = ddp(xb)
            loss = loss_fn(logits, yb)
            loss.backward()
            opt.step()
            (logits.argmax(1) == yb).sum().item()  # the accuracy metric strata keeps too
            n += xb.shape[0] * world
        return n

    epoch(steps=warmup_steps)
    dist.barrier()
    start = time.perf_counter()
    n = epoch()
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"images_per_s": n / seconds, "seconds": seconds}), flush=True)
    dist.destroy_process_group()


def last_json(text, prefix=""):
    """The last line of `text` that is a JSON object (after `prefix`, e.g. strata launch's "[worker:0] ")."""
    for line in reversed(text.splitlines()):
        line = line[len(prefix):] if prefix and line.startswith(prefix) else line
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON line in:\n{text[-2000:]}")


def bench_args(binary, strategy, replicas, threads, data):
    return [binary, "--strategy", strategy, "--replicas", str(replicas), "--threads", str(threads),
            "--batch", str(BATCH), "--data", data]


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
        env = dict(pinned_env(1), TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}))
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
    procs = [children.start([sys.executable, os.path.abspath(__file__), "--ddp-worker", str(r), "--port", str(port),
                             "--data", args.data], env) for r in range(WORKERS)]
    outs = children.wait_all(procs, "PyTorch DDP")
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
    parser.add_argument("--ddp-worker", type=int, metavar="RANK", default=None)
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.ddp_worker is not None:
        ddp_worker(args.ddp_worker, WORKERS, args.port, args.data)
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
    configs = {"ceiling": run_ceiling, "strata gloo": run_gloo,
               "strata gloo, 256 KiB buckets": lambda c, a: run_gloo(c, a, bucket_kb=256),
               "strata gloo, 8 steps/execution": lambda c, a: run_gloo(c, a, steps_per_execution=8),
               "PyTorch DDP": run_ddp}
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

    print(f"# CNN on Fashion-MNIST, {WORKERS} workers x 1 thread, global batch {BATCH}, Adam; one steady epoch; "
          f"best of {args.rounds}")
    for name in configs:
        print(f"{name:<30} {best[name]:10.0f} images/s")
    ceiling, ddp = best["ceiling"], best["PyTorch DDP"]
    for name in [n for n in configs if n.startswith("strata")]:
        print(f"{name} / ceiling: {best[name] / ceiling:.2f} (target >= 0.9); {name} / PyTorch DDP: "
              f"{best[name] / ddp:.2f} (target >= 2)")
    print(f"PyTorch DDP / ceiling: {ddp / ceiling:.2f}")
    gloo_step_ceiling(args, ceiling, best["strata gloo"])
    if not args.no_slow_link:
        slow_link(args, ceiling)
        local_sgd_slow_link(args)
    return 0


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
          f"global batch {BATCH}; 2 epochs (images/s of the second); best of {args.rounds}")
    base = best["MultiWorkerMirrored"]["images_per_s"]
    for name, _, _ in runs:
        out = best[name]
        print(f"{name:<32} {out['images_per_s']:10.0f} images/s ({out['images_per_s'] / base:.2f}x)  "
              f"test accuracy {out['test_accuracy']:.4f}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
