#!/usr/bin/env python3
"""Collectives across processes: strata's gloo and mpi backends beside raw Gloo, raw MPI, torch.distributed (gloo) and
TensorFlow's collective ops.

    .venv-peers/bin/peer-python bench/comm_bench.py [--binary build/bench/comm_bench] [--procs 2,4] [--max-mb 64]
        [--rounds 3] [--backends gloo,mpi] [--time-limit 480] [--no-tf] [--no-torch]

For 2 and 4 processes and sizes 1 KB .. 64 MB (powers of 4) it times all_reduce (sum), broadcast (root 0) and
all_gather (the size is the gathered output), all on float32 buffers, and prints one table:
  gloo: strata's gloo backend and raw Gloo come from `comm_bench --json`, which runs both on the same buffers in the
    same forked processes, alternating them in rounds.
  mpi: strata's mpi backend and raw MPI (MPI_Allreduce in place / MPI_Bcast / MPI_Allgather) come from
    `mpirun --allow-run-as-root --oversubscribe --bind-to none -np N comm_bench --backend mpi --json`, the same
    loop on the same buffers in the same mpirun ranks (--bind-to none: the ranks float over the cores, as the forked
    gloo ranks do).
  torch.distributed (the gloo peer; PyTorch 2) runs in as many spawned processes of this script (MASTER_ADDR=127.0.0.1,
    a free port, GLOO_SOCKET_IFNAME=lo, init_process_group("gloo"), OMP/OpenBLAS/MKL threads pinned to 1) on tensors
    of the same sizes.
  TensorFlow runs in as many processes of this script, each a MultiWorkerMirroredStrategy worker (TF_CONFIG on
    127.0.0.1, ports the OS picked, CommunicationImplementation.RING: its collective ops over gRPC; intra-op 1,
    inter-op 2 threads): all_reduce is ReplicaContext.all_reduce(SUM) and all_gather ReplicaContext.all_gather, each
    op of a row repeated inside one tf.function (ordered by control dependencies), so the time per op is the
    collective's, not the function call's, as in a training step's graph. Broadcast has no TensorFlow column: no
    public TensorFlow API broadcasts across workers (MultiWorkerMirroredStrategy's is internal).
Every side is timed exactly as comm_bench.cc times its sides: a barrier, one warm-up op, then
clamp(64 MB / size, 3, 100) ops, the mean per op; the best of `--rounds` rounds counts, and rank 0's clock is the one
reported. Bus bandwidth is NCCL's convention, as in comm_bench.cc (all_reduce x 2(n-1)/n, broadcast x 1,
all_gather x (n-1)/n).

Targets (issue 17): at >= 1 MB strata gloo within 10% of raw Gloo and strata mpi within 10% of raw MPI; below 1 MB
at most 20 us added over the raw library; strata gloo never slower than torch.distributed gloo. Each target gets a
verdict line naming the rows that miss it.
Every child runs in its own session and is killed on every path, with every process of its session (comm_bench's
forked ranks; mpirun's ranks, which mpirun puts in process groups of their own); the whole run stops at
--time-limit. On a 2-core machine 4 processes oversubscribe the cores, so its 4-process rows are noisy.
"""
import argparse
import functools
import json
import os
import shutil
import signal
import sys
import time

import peers
from bench_common import Children, find_binary, free_port

COLLECTIVES = ("all_reduce", "broadcast", "all_gather")


def sizes(max_mb):
    out, b = [], 1024
    while b <= max_mb << 20:
        out.append(b)
        b *= 4
    return out


def bus_gbps(coll, nbytes, n, seconds):
    algbw = nbytes / seconds / 1e9
    return {"all_reduce": algbw * 2.0 * (n - 1) / n, "broadcast": algbw, "all_gather": algbw * (n - 1) / n}[coll]


def human(nbytes):
    return f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"


# ---------------------------------------------------------------------------------------------- torch worker
def torch_worker(rank, world, port, max_mb, rounds):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=__import__("datetime").timedelta(seconds=60))
    for coll in COLLECTIVES:
        for nbytes in sizes(max_mb):
            numel = nbytes // 4
            in_numel = max(1, numel // world) if coll == "all_gather" else numel
            buf = torch.full((in_numel,), 1.0 + rank, dtype=torch.float32)
            outs = [torch.zeros(in_numel, dtype=torch.float32) for _ in range(world)]
            iters = min(max((64 << 20) // nbytes, 3), 100)
            if coll == "all_reduce":
                op = lambda: dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            elif coll == "broadcast":
                op = lambda: dist.broadcast(buf, src=0)
            else:
                op = lambda: dist.all_gather(outs, buf)
            best = float("inf")
            for _ in range(rounds):
                dist.barrier()
                op()  # warm-up
                start = time.perf_counter()
                for _ in range(iters):
                    op()
                best = min(best, (time.perf_counter() - start) / iters)
            if rank == 0:
                moved = in_numel * world * 4 if coll == "all_gather" else nbytes
                print(json.dumps({"procs": world, "collective": coll, "bytes": nbytes, "torch_us": best * 1e6,
                                  "torch_busbw": bus_gbps(coll, moved, world, best)}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def tf_worker(rank, max_mb, rounds):
    """One MultiWorkerMirroredStrategy worker (TF_CONFIG from the driver); rank 0 prints a JSON row per collective and
    size (all_reduce, all_gather)."""
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING))
    world = strategy.num_replicas_in_sync
    for coll in ("all_reduce", "all_gather"):
        for nbytes in sizes(max_mb):
            numel = nbytes // 4
            in_numel = max(1, numel // world) if coll == "all_gather" else numel
            iters = min(max((64 << 20) // nbytes, 3), 100)
            buf = tf.fill([in_numel], 1.0 + rank)

            def replica_fn(t, coll=coll, iters=iters):
                ctx = tf.distribute.get_replica_context()
                t = tf.identity(t)  # placed on the replica's device: a collective's destination is its input's device
                out = t
                for _ in range(iters):
                    with tf.control_dependencies([out]):
                        out = ctx.all_reduce("SUM", t) if coll == "all_reduce" else ctx.all_gather(t, axis=0)
                return tf.reduce_sum(out[:1])

            fn = tf.function(functools.partial(strategy.run, replica_fn))
            float(strategy.experimental_local_results(fn(args=(buf,)))[0])  # traces, and runs once (the warm-up)
            best = float("inf")
            for _ in range(rounds):
                start = time.perf_counter()
                float(strategy.experimental_local_results(fn(args=(buf,)))[0])
                best = min(best, (time.perf_counter() - start) / iters)
            if rank == 0:
                moved = in_numel * world * 4 if coll == "all_gather" else nbytes
                print(json.dumps({"procs": world, "collective": coll, "bytes": nbytes, "tf_us": best * 1e6,
                                  "tf_busbw": bus_gbps(coll, moved, world, best)}), flush=True)


# ---------------------------------------------------------------------------------------------- driver
def parse_rows(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def run_strata(children, binary, n, args):
    (out,) = children.wait_all([children.start(
        [binary, "--procs", str(n), "--max-mb", str(args.max_mb), "--rounds", str(args.rounds), "--json"])],
        f"comm_bench --procs {n}")
    return parse_rows(out)


def run_mpi(children, binary, n, args):
    # A clean MPI environment: no rank variables of an enclosing mpirun, and MPI_THREAD_MULTIPLE (the raw side needs it).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    env.pop("STRATA_MPI_THREAD_LEVEL", None)
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    (out,) = children.wait_all([children.start(
        [args.mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(n), binary,
         "--backend", "mpi", "--max-mb", str(args.max_mb), "--rounds", str(args.rounds), "--json"], env)],
        f"mpirun -np {n} comm_bench --backend mpi")
    return parse_rows(out)


def run_tf(children, n, args):
    cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(n)]}
    procs = [children.start([args.peers["tf"].python, os.path.abspath(__file__), "--tf-worker", str(r), "--max-mb",
                             str(args.max_mb), "--rounds", str(args.rounds)],
                            peers.env(1, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker",
                                                                                           "index": r}})))
             for r in range(n)]
    outs = children.wait_all(procs, f"TensorFlow collectives, {n} processes")
    return parse_rows(outs[0])


def run_torch(children, n, args):
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    procs = [children.start([args.peers["torch"].python, os.path.abspath(__file__), "--torch-worker", str(r), "--world", str(n),
                             "--port", str(port), "--max-mb", str(args.max_mb), "--rounds", str(args.rounds)], env)
             for r in range(n)]
    outs = children.wait_all(procs, f"torch.distributed gloo, {n} processes")
    return parse_rows(outs[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--binary", default=None)
    parser.add_argument("--procs", default="2,4")
    parser.add_argument("--max-mb", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per row; the best counts")
    parser.add_argument("--backends", default="gloo,mpi",
                        help="gloo (strata gloo, raw Gloo, torch.distributed gloo) and/or mpi (strata mpi, raw MPI)")
    parser.add_argument("--mpirun", default="mpirun", help="OpenMPI's mpirun, for the mpi rows")
    parser.add_argument("--time-limit", type=float, default=480, help="seconds for the whole run")
    parser.add_argument("--torch-worker", type=int, metavar="RANK", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tf-worker", type=int, metavar="RANK", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    peers.add_arguments(parser)
    args = parser.parse_args()
    if args.torch_worker is not None:
        torch_worker(args.torch_worker, args.world, args.port, args.max_mb, args.rounds)
        return 0
    if args.tf_worker is not None:
        tf_worker(args.tf_worker, args.max_mb, args.rounds)
        return 0
    binary = find_binary("comm_bench", args.binary)
    procs = [int(p) for p in args.procs.split(",")]
    backends = [b for b in args.backends.split(",") if b]
    if not backends or set(backends) - {"gloo", "mpi"}:
        sys.exit(f"comm_bench.py: --backends takes gloo and/or mpi, not {args.backends!r}")
    gloo, mpi = "gloo" in backends, "mpi" in backends
    if mpi and shutil.which(args.mpirun) is None:
        sys.exit(f"comm_bench.py: {args.mpirun} is not on the PATH (install openmpi-bin) or pass --backends gloo")
    args.peers = peers.find(args)
    has_torch, has_tf = gloo and args.peers["torch"].ok, gloo and args.peers["tf"].ok
    children = Children(time.monotonic() + args.time_limit)
    # (procs, collective, bytes) -> {"gloo": comm_bench row, "mpi": comm_bench row, "torch": torch row, "tf": TF row}
    rows = {}
    started = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("comm_bench.py: terminated"))  # so that `finally` runs
    try:
        for n in procs:
            if gloo:
                for r in run_strata(children, binary, n, args):
                    rows.setdefault((n, r["collective"], r["bytes"]), {})["gloo"] = r
                for r in run_torch(children, n, args) if has_torch else []:
                    rows.setdefault((n, r["collective"], r["bytes"]), {})["torch"] = r
                for r in run_tf(children, n, args) if has_tf else []:
                    rows.setdefault((n, r["collective"], r["bytes"]), {})["tf"] = r
            if mpi:
                for r in run_mpi(children, binary, n, args):
                    rows.setdefault((n, r["collective"], r["bytes"]), {})["mpi"] = r
    except RuntimeError as e:
        sys.exit(f"comm_bench.py: {e}")
    finally:
        children.kill_all()
    elapsed = time.monotonic() - started

    sides = []
    if gloo:
        sides.append("gloo = strata gloo, rawgloo = raw Gloo (comm_bench, same buffers and processes), "
                     f"torch = torch.distributed gloo ({args.peers['torch'].label}), tf = TensorFlow's collective ops "
                     f"(ring, {args.peers['tf'].label}; no broadcast)")
    if mpi:
        sides.append("mpi = strata mpi, rawmpi = raw blocking MPI, nbmpi = raw non-blocking MPI (MPI_I* + MPI_Wait: "
                     "the ceiling of a backend whose calls have timeouts) (comm_bench --backend mpi under mpirun, same "
                     "buffers and processes)")
    print("# " + "; ".join(sides))
    for key in ("torch", "tf"):
        if gloo and not args.peers[key].ok:
            print(args.peers[key].skip_line())
    print(f"# latency us: mean per op of the best of {args.rounds} rounds; busbw GB/s (NCCL convention); "
          f"{elapsed:.0f} s; strata: {binary}")
    # (title, width, value of a row's sides)
    columns = [("procs", 5, None), ("collective", -10, None), ("size", 6, None)]
    if gloo:
        columns += [("gloo_us", 9, lambda r: r["gloo"]["strata_us"]), ("rawgloo_us", 10, lambda r: r["gloo"]["raw_us"]),
                    ("torch_us", 9, lambda r: r["torch"]["torch_us"]), ("tf_us", 9, lambda r: r["tf"]["tf_us"])]
    if mpi:
        columns += [("mpi_us", 9, lambda r: r["mpi"]["strata_us"]), ("rawmpi_us", 9, lambda r: r["mpi"]["raw_us"]),
                    ("nbmpi_us", 9, lambda r: r["mpi"]["ceiling_us"])]
    if gloo:
        columns += [("g/raw", 6, lambda r: r["gloo"]["strata_us"] / r["gloo"]["raw_us"]),
                    ("g/torch", 7, lambda r: r["gloo"]["strata_us"] / r["torch"]["torch_us"]),
                    ("g/tf", 6, lambda r: r["gloo"]["strata_us"] / r["tf"]["tf_us"])]
    if mpi:
        columns += [("m/raw", 6, lambda r: r["mpi"]["strata_us"] / r["mpi"]["raw_us"]),
                    ("m/nb", 6, lambda r: r["mpi"]["strata_us"] / r["mpi"]["ceiling_us"])]
    if gloo:
        columns += [("gloo_bw", 8, lambda r: r["gloo"]["strata_busbw"]), ("rawgloo_bw", 10, lambda r: r["gloo"]["raw_busbw"]),
                    ("torch_bw", 8, lambda r: r["torch"]["torch_busbw"]), ("tf_bw", 8, lambda r: r["tf"]["tf_busbw"])]
    if mpi:
        columns += [("mpi_bw", 8, lambda r: r["mpi"]["strata_busbw"]), ("rawmpi_bw", 9, lambda r: r["mpi"]["raw_busbw"])]

    def cell(width, text):
        return f"{text:<{-width}}" if width < 0 else f"{text:>{width}}"

    print("  ".join(cell(w, title) for title, w, _ in columns))
    targets = []  # (title, rows counted, misses)
    if gloo:
        targets += [[">= 1 MB: strata gloo within 10% of raw Gloo", 0, []],
                    ["< 1 MB: strata gloo adds at most 20 us over raw Gloo", 0, []],
                    ["strata gloo never slower than torch.distributed gloo (PyTorch 2)", 0, []]]
    if mpi:
        targets += [[">= 1 MB: strata mpi within 10% of raw MPI", 0, []],
                    ["< 1 MB: strata mpi adds at most 20 us over raw MPI", 0, []],
                    [">= 1 MB: strata mpi within 10% of raw non-blocking MPI (the ceiling with timeouts)", 0, []]]
    large_small = {}  # backend -> (>= 1 MB target, < 1 MB target)
    i = 0
    if gloo:
        large_small["gloo"] = (targets[0], targets[1])
        i = 3
    if mpi:
        large_small["mpi"] = (targets[i], targets[i + 1])
    for n in procs:
        for coll in COLLECTIVES:
            for nbytes in sizes(args.max_mb):
                r = rows.get((n, coll, nbytes), {})
                needed = (["gloo"] if gloo else []) + (["torch"] if has_torch else []) + (["mpi"] if mpi else [])
                if any(side not in r for side in needed):
                    raise SystemExit(f"missing row {n} {coll} {human(nbytes)}: {r}")
                values = [str(n), coll, human(nbytes)]
                for title, w, get in columns[3:]:
                    precision = 1 if title.endswith("_us") else 3
                    try:
                        values.append(f"{get(r):.{precision}f}")
                    except KeyError:  # a peer that was skipped, or TensorFlow's broadcast
                        values.append("-")
                print("  ".join(cell(w, v) for (_, w, _), v in zip(columns, values)))
                name = f"{n}p {coll} {human(nbytes)}"
                for backend, (large, small) in large_small.items():
                    s, raw = r[backend]["strata_us"], r[backend]["raw_us"]
                    if nbytes >= 1 << 20:
                        large[1] += 1
                        if s > 1.10 * raw:
                            large[2].append(f"{name} ({s / raw:.2f}x)")
                    else:
                        small[1] += 1
                        if s - raw > 20.0:
                            small[2].append(f"{name} (+{s - raw:.0f} us)")
                if mpi and nbytes >= 1 << 20:
                    s, nb = r["mpi"]["strata_us"], r["mpi"]["ceiling_us"]
                    ceiling = targets[-1]
                    ceiling[1] += 1
                    if s > 1.10 * nb:
                        ceiling[2].append(f"{name} ({s / nb:.2f}x)")
                if has_torch:
                    s, t = r["gloo"]["strata_us"], r["torch"]["torch_us"]
                    targets[2][1] += 1
                    if s > t:
                        targets[2][2].append(f"{name} ({s / t:.2f}x)")

    print()
    for title, total, misses in targets:
        if total == 0:
            print(f"{title}: " + ("no PyTorch 2 column" if "torch" in title and not has_torch else
                                  "no rows (raise --max-mb)"))
            continue
        status = "MET" if not misses else f"MISSED in {len(misses)} of {total} rows"
        print(f"{title}: {status}" + (": " + ", ".join(misses) if misses else ""))
    if has_tf:
        tf_rows = [r for r in rows.values() if "tf" in r and "gloo" in r]
        faster = [r for r in tf_rows if r["gloo"]["strata_us"] < r["tf"]["tf_us"]]
        print(f"strata gloo against TensorFlow's ring collectives (all_reduce, all_gather): faster in {len(faster)} of "
              f"{len(tf_rows)} rows")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
