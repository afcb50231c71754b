#!/usr/bin/env python3
"""Asynchronous parameter-server training (issue 18) against synchronous MultiWorkerMirrored on the same job, and against
TensorFlow's ParameterServerStrategy with the same tasks.

    .venv-peers/bin/peer-python bench/parameter_server_bench.py [--binary build/bench/distribute_bench]
        [--strata build/strata] [--steps 200] [--rounds 1] [--time-limit 1200] [--skip-push-pull] [--skip-ctr]
        [--skip-failover] [--no-tf]

1. Push + pull throughput of one ps against a bare gRPC echo of the same bytes (build/bench/ps_bench, 1-64 MB).
2. Training images/s of the Keras tutorial CNN on Fashion-MNIST (Adam, 1 thread per worker, --steps steps timed after
   as many warm-up steps, 127.0.0.1; --steps 0: an epoch of 60000 images after a warm-up epoch):
   - ParameterServerStrategy: `strata launch --chief --workers N --ps 2 -- distribute_bench --strategy
     parameter_server --batch 64`: every step is a batch of 64 on one worker (pull every variable, forward, backward,
     push every gradient; the ps applies Adam), N = 1 and 2;
   - MultiWorkerMirroredStrategy: `strata launch --workers N -- distribute_bench --strategy multi_worker_mirrored
     --batch 64N`: each worker computes on 64 images a step, as a ps worker does, N = 1 and 2.
   - TensorFlow's ParameterServerStrategy with the same tasks, each a process of this script: 2 ps and N workers
     running tf.distribute.Server (grpc, 127.0.0.1, ports the OS picked; intra-op 1, inter-op 2 threads), and the
     chief with ParameterServerStrategy and ClusterCoordinator as TensorFlow's tutorial "Parameter server training"
     has them: a custom training loop (Keras 3's fit does not take this strategy), the Keras model, Adam and accuracy
     metric made under strategy.scope() (variables round-robin over the ps), coordinator.schedule of a tf.function
     step on per-worker datasets (each worker reads the IDX files with tf.data: FixedLengthRecordDataset over GZIP,
     decoded and scaled, cache, shuffle(60000), repeat, batch 64, prefetch), then coordinator.join(); images/s of the
     timed steps. The target (issue 39): strata's parameter_server images/s above TensorFlow's with the same tasks.
   Every configuration runs --rounds times, alternating; the best run counts (2 cores: single runs vary).
   The machine has 2 cores: with 2 workers the chief and the 2 ps tasks share them with the workers.
3. The embedding (CTR) model's examples/s with sparse against dense pushes (build/bench/ps_ctr_bench: SGD with 1
   and 2 workers, Adam with 1).
4. A lost ps (issue 38), 2 workers and 2 ps: images/s with each shard backed up on the other ps (the default) and
   without (--ps-backups 0), best of --rounds, which is the replication's cost; then one run with backups in which
   ps:1 is SIGKILLed halfway through the timed steps (`strata launch --max-restarts 1` restarts it, and it copies its
   shards back as their backup): the time from the kill to the first step that ended after it (every step pulls and
   pushes a shard of ps:1, so that step was served by its backup), against the steady time between two steps, and
   the run's images/s and test accuracy with the loss in it.
Every child runs in its own session and is killed with what it forked on every path.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import peers
from bench_common import Children, find_binary, free_port, kill_session
from multiworker_bench import last_json, pinned_env

DATA = peers.FASHION_MNIST
STEP_BATCH = 64
PS_TASKS = 2


def tf_task(role, index, cluster, data_dir, steps):
    """One task of TensorFlow's parameter-server cluster: a ps or worker serves until killed; the chief trains and
    prints the images/s of `steps` steps scheduled after as many warm-up steps."""
    import tensorflow as tf
    spec = tf.train.ClusterSpec(cluster)
    if role != "chief":
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=2)
        tf.distribute.Server(spec, job_name=role, task_index=index, protocol="grpc", config=config, start=True).join()
        return
    peers.pin_tf(1)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, task_type="chief", task_id=0,
                                                                     rpc_layer="grpc")
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    import keras
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = peers.keras_model("cnn")
        optimizer = model.optimizer
        optimizer.build(model.trainable_variables)
        accuracy = keras.metrics.SparseCategoricalAccuracy()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def dataset_fn(_):
        images = tf.data.FixedLengthRecordDataset(f"{data_dir}/train-images-idx3-ubyte.gz", 784, header_bytes=16,
                                                  compression_type="GZIP")
        labels = tf.data.FixedLengthRecordDataset(f"{data_dir}/train-labels-idx1-ubyte.gz", 1, header_bytes=8,
                                                  compression_type="GZIP")
        images = images.map(lambda r: tf.cast(tf.reshape(tf.io.decode_raw(r, tf.uint8), [28, 28, 1]), tf.float32) / 255)
        labels = labels.map(lambda r: tf.cast(tf.io.decode_raw(r, tf.uint8)[0], tf.int64))
        return (tf.data.Dataset.zip((images, labels)).cache().shuffle(60000).repeat().batch(STEP_BATCH)
                .prefetch(tf.data.AUTOTUNE))

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    @tf.function
    def step_fn(it):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf.nn.compute_average_loss(loss_fn(y, logits))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            accuracy.update_state(y, logits)
            return loss

        x, y = next(it)
        return strategy.reduce("SUM", strategy.run(replica_fn, args=(x, y)), axis=None)

    for _ in range(steps):
        coordinator.schedule(step_fn, args=(iterator,))
    coordinator.join()
    start = time.perf_counter()
    for _ in range(steps):
        result = coordinator.schedule(step_fn, args=(iterator,))
    coordinator.join()
    seconds = time.perf_counter() - start
    print(json.dumps({"images_per_s": steps * STEP_BATCH / seconds, "seconds": seconds, "loss": float(result.fetch()),
                      "train_accuracy": float(accuracy.result())}), flush=True)


def run_tf(children, args, workers):
    """TensorFlow's cluster: PS_TASKS ps and `workers` workers serving, the chief training; every task killed after."""
    cluster = {"chief": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}" for _ in range(workers)],
               "ps": [f"127.0.0.1:{free_port()}" for _ in range(PS_TASKS)]}
    me = [args.peers["tf"].python, os.path.abspath(__file__), "--data", args.data, "--steps", str(args.steps),
          "--cluster", json.dumps(cluster), "--tf-task"]
    servers = [children.start(me + [role, str(i)], peers.env(1)) for role in ("ps", "worker")
               for i in range(len(cluster[role]))]
    try:
        (out,) = children.wait_all([children.start(me + ["chief", "0"], peers.env(1))],
                                   f"TensorFlow parameter server x{workers}")
    finally:
        for p in servers:
            if p.poll() is None:
                kill_session(p.pid)
    return last_json(out)


def launch_env():
    return {k: v for k, v in pinned_env(1).items() if k != "TF_CONFIG"}


def explain(children, args, missed):
    """Where strata's parameter-server job is not above TensorFlow's: each side's step alone (one process, 1 thread,
    batch 64, no strategy: strata's fit under OneDeviceStrategy, TensorFlow's custom loop of multiworker_bench.py),
    so each side's time per step beyond computing it (pull, push, dispatch, and the 2 cores shared by every task) is
    measured."""
    (out,) = children.wait_all([children.start(
        [args.binary, "--strategy", "one_device", "--replicas", "1", "--threads", "1", "--batch", str(STEP_BATCH),
         "--data", args.data, "--steps-per-epoch", str(args.steps)], pinned_env(1))], "strata alone")
    strata_alone = last_json(out)["images_per_s"]
    (out,) = children.wait_all([children.start(
        [args.peers["tf"].python, os.path.join(os.path.dirname(os.path.abspath(__file__)), "multiworker_bench.py"),
         "--tf-worker", "0", "--alone", "--data", args.data, "--steps", str(args.steps)], peers.env(1))],
        "TensorFlow alone")
    tf_alone = last_json(out)["images_per_s"]
    us = lambda ips: STEP_BATCH / ips * 1e6
    print(f"what bounds it: a step alone (1 thread, batch {STEP_BATCH}, no strategy) takes strata {us(strata_alone):.0f} "
          f"us, TensorFlow {us(tf_alone):.0f} us")
    for workers, ps, tf_ps in missed:
        # With `workers` workers stepping at once, each step's share of the job's time is workers x its time per step.
        print(f"  {workers} worker(s): a parameter-server step takes strata {workers * us(ps):.0f} us on its worker "
              f"({workers * us(ps) - us(strata_alone):.0f} us beyond computing), TensorFlow {workers * us(tf_ps):.0f} "
              f"us ({workers * us(tf_ps) - us(tf_alone):.0f} us beyond computing)")


def ps_command(args, workers, extra=(), max_restarts=0):
    return [args.strata, "launch", "--chief", "--workers", str(workers), "--ps", str(PS_TASKS), "--max-restarts",
            str(max_restarts), "--", args.binary, "--strategy", "parameter_server", "--threads", "1", "--batch",
            str(STEP_BATCH), "--data", args.data, "--steps-per-epoch", str(args.strata_steps), *extra]


def run_ps(children, args, workers, extra=()):
    (out,) = children.wait_all([children.start(ps_command(args, workers, extra), launch_env())],
                               f"parameter_server x{workers} {' '.join(extra)}")
    return last_json(out, "[chief:0] ")


def task_pid(binary, task_type, index):
    """The pid of the process running `binary` as task `task_type`:`index` of a launched job (by its TF_CONFIG)."""
    want = f'"task":{{"index":{index},"type":"{task_type}"}}'.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if os.path.basename(binary).encode() not in f.read():
                    continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if want in f.read():
                    return int(entry)
        except OSError:
            continue
    return None


def run_ps_loss(children, args, workers, scratch):
    """One run with backups in which ps:1 is SIGKILLed halfway through the timed epoch: (the run's JSON, seconds from
    the kill to the first step that ended after it, the median seconds between two steps before it, the launcher's
    stderr)."""
    steps = args.strata_steps or 60000 // STEP_BATCH
    times_path = os.path.join(scratch, "step_times")
    p = children.start(ps_command(args, workers, ["--step-times", times_path], max_restarts=1), launch_env())
    killed_at = None
    while killed_at is None and p.poll() is None and time.monotonic() < children.deadline:
        try:
            with open(times_path) as f:
                done = sum(1 for _ in f)
        except OSError:
            done = 0
        if done >= steps + steps // 2:  # the warm-up epoch, then half the timed one
            pid = task_pid(args.binary, "ps", 1)
            if pid is None:
                sys.exit("the ps:1 task was not found to kill")
            killed_at = time.time()
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)
    try:
        out, err = p.communicate(timeout=max(children.deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        raise RuntimeError("parameter_server with ps:1 killed: over the time limit; killed")
    if p.returncode != 0:
        raise RuntimeError(f"parameter_server with ps:1 killed: exited {p.returncode}: {err.strip()[-2000:]}")
    with open(times_path) as f:
        ends = [float(line) for line in f if line.strip()]
    before = [b - a for a, b in zip(ends, ends[1:]) if b < killed_at][-200:]
    after = next(t for t in ends if t > killed_at)
    return last_json(out, "[chief:0] "), after - killed_at, sorted(before)[len(before) // 2], err


def run_mwms(children, args, workers):
    cmd = [args.strata, "launch", "--workers", str(workers), "--",
           args.binary, "--strategy", "multi_worker_mirrored", "--replicas", "1", "--threads", "1",
           "--batch", str(STEP_BATCH * workers), "--data", args.data, "--steps-per-epoch",
           str(args.strata_steps // workers)]
    (out,) = children.wait_all([children.start(cmd, launch_env())], f"multi_worker_mirrored x{workers}")
    return last_json(out, "[worker:0] ")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", help="distribute_bench (default: build/bench/distribute_bench)")
    parser.add_argument("--strata", default=None, help="the strata binary (default: build/strata)")
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=1200)
    parser.add_argument("--skip-push-pull", action="store_true")
    parser.add_argument("--skip-ctr", action="store_true", help="skip part 3, the embedding model")
    parser.add_argument("--skip-failover", action="store_true", help="skip part 4, a lost ps")
    parser.add_argument("--steps", type=int, default=200,
                        help="timed steps of batch 64 per configuration, after as many warm-up steps (0: an epoch)")
    parser.add_argument("--tf-task", nargs=2, metavar=("ROLE", "INDEX"), help=argparse.SUPPRESS)
    parser.add_argument("--cluster", help=argparse.SUPPRESS)
    peers.add_arguments(parser)
    args = parser.parse_args()
    args.strata_steps = args.steps
    args.steps = args.steps or 60000 // STEP_BATCH
    if args.tf_task:
        return tf_task(args.tf_task[0], int(args.tf_task[1]), json.loads(args.cluster), args.data, args.steps)
    args.binary = find_binary("distribute_bench", args.binary)
    args.strata = args.strata or os.path.join(os.path.dirname(os.path.dirname(args.binary)), "strata")
    if not any(os.path.exists(os.path.join(args.data, "train-images-idx3-ubyte" + ext)) for ext in ("", ".gz")):
        sys.exit(f"no Fashion-MNIST in {args.data} (the README's first command installs it)")
    args.peers = peers.find(args)
    runs = [("parameter_server", run_ps), ("multi_worker_mirrored", run_mwms)]
    if args.peers["tf"].ok:
        runs.append(("TensorFlow parameter_server", run_tf))
    children = Children(time.monotonic() + args.time_limit)
    try:
        if not args.skip_push_pull:
            print("== push + pull of one ps against a bare gRPC echo of the same bytes", flush=True)
            ps_bench = find_binary("ps_bench")
            print(subprocess.run([ps_bench], capture_output=True, text=True, check=True,
                                 timeout=args.time_limit).stdout, flush=True)

        print(f"== CNN images/s, batch {STEP_BATCH} per worker step, 1 thread per worker, best of {args.rounds}",
              flush=True)
        best = {}
        for _ in range(args.rounds):
            for workers in (1, 2):
                for name, fn in runs:
                    result = fn(children, args, workers)
                    key = (name, workers)
                    if key not in best or result["images_per_s"] > best[key]["images_per_s"]:
                        best[key] = result
        for workers in (1, 2):
            ps, mw = best[("parameter_server", workers)], best[("multi_worker_mirrored", workers)]
            print(f"{workers} worker(s): parameter_server {ps['images_per_s']:8.0f} images/s "
                  f"(test accuracy {ps['test_accuracy']:.4f})   multi_worker_mirrored {mw['images_per_s']:8.0f} images/s "
                  f"(test accuracy {mw['test_accuracy']:.4f})   ratio {ps['images_per_s'] / mw['images_per_s']:.2f}",
                  flush=True)
        missed = []
        for workers in (1, 2):
            tf_ps = best.get(("TensorFlow parameter_server", workers))
            if tf_ps is None:
                print(args.peers["tf"].skip_line())
                break
            ps = best[("parameter_server", workers)]
            ratio = ps["images_per_s"] / tf_ps["images_per_s"]
            print(f"{workers} worker(s), chief + {PS_TASKS} ps: TensorFlow ParameterServerStrategy "
                  f"{tf_ps['images_per_s']:8.0f} images/s (train accuracy {tf_ps['train_accuracy']:.4f}); strata / "
                  f"TensorFlow {ratio:.2f} (target > 1){'' if ratio > 1 else ' MISSED'}", flush=True)
            if ratio <= 1:
                missed.append((workers, ps["images_per_s"], tf_ps["images_per_s"]))
        if missed:
            explain(children, args, missed)
        scale_ps = best[("parameter_server", 2)]["images_per_s"] / best[("parameter_server", 1)]["images_per_s"]
        scale_mw = best[("multi_worker_mirrored", 2)]["images_per_s"] / best[("multi_worker_mirrored", 1)]["images_per_s"]
        print(f"2 workers over 1: parameter_server x{scale_ps:.2f}, multi_worker_mirrored x{scale_mw:.2f}", flush=True)

        ctr = find_binary("ps_ctr_bench")
        for optimizer, workers in () if args.skip_ctr else (("sgd", 1), ("sgd", 2), ("adam", 1)):
            print(f"== the embedding (CTR) model: sparse against dense pushes ({optimizer}, {workers} worker(s))",
                  flush=True)
            print(subprocess.run([ctr, "--optimizer", optimizer, "--workers", str(workers), "--seconds", "3",
                                  "--repeats", "3"], capture_output=True, text=True, check=True,
                                 timeout=args.time_limit).stdout, flush=True)
        if not args.skip_failover:
            print(f"== a lost ps: 2 workers, {PS_TASKS} ps, best of {args.rounds}", flush=True)
            backed = {}
            for _ in range(args.rounds):
                for flag in ("1", "0"):
                    result = run_ps(children, args, 2, ["--ps-backups", flag])
                    if flag not in backed or result["images_per_s"] > backed[flag]["images_per_s"]:
                        backed[flag] = result
            print(f"with backups {backed['1']['images_per_s']:8.0f} images/s, without {backed['0']['images_per_s']:8.0f}"
                  f" images/s: the replication costs {1 - backed['1']['images_per_s'] / backed['0']['images_per_s']:.1%}"
                  f" of the throughput", flush=True)
            with tempfile.TemporaryDirectory() as scratch:
                run, to_first, steady, launcher_said = run_ps_loss(children, args, 2, scratch)
            restarted = "ps:1 was killed by signal 9 (SIGKILL); restarting it alone" in launcher_said
            print(f"ps:1 SIGKILLed mid-epoch: the first step ended {to_first * 1e3:.0f} ms after the kill (a step ends "
                  f"every {steady * 1e3:.1f} ms before it); ps:1 {'restarted' if restarted else 'NOT restarted'}; the "
                  f"run: {run['images_per_s']:.0f} images/s, test accuracy {run['test_accuracy']:.4f}", flush=True)
    finally:
        children.kill_all()


if __name__ == "__main__":
    main()
