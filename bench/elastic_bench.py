#!/usr/bin/python3
"""Elastic synchronous training: what a membership change costs (issue 20).

    /usr/bin/python3 bench/elastic_bench.py [--strata build/strata] [--time-limit 900]

Runs `strata launch --workers 3 --min-workers 2` with `strata train --strategy multi_worker_mirrored` on 127.0.0.1,
and has worker:2 kill itself with SIGKILL a few seconds into training (`--kill-after`), for two models:
  - the Fashion-MNIST CNN (configs/fashion_mnist_cnn.yaml, one epoch, batch 64; 0.9 MB of weights),
  - an MLP of about 100 MB of weights (784-4096-4096-1024-10, Adam) on 80 steps of generated 28x28 images.
Each model runs twice:
  - without restarts: the survivors detect the loss (the killed worker's connections close, or the collective
    bound — the heartbeat timeout, 10 s — ends their step) and wait for the coordination service to declare it lost
    (the heartbeat timeout), then regroup; the figure is the survivors' "regrouped in" (from the start of the
    discarded step to the new group's communicator: detection + regrouping);
  - with `--max-restarts 1`: the launcher restarts the worker at once, it says it was restarted (so the survivors
    need not wait for the heartbeat timeout), and it joins at the next step boundary: the survivors' "regrouped in",
    then the admission (the new epoch's communicator on the members) and the state transfer to the joiner (the
    chief's weights, optimizer state and input position: "state sent in ... (MB)").
Every child runs in its own session and is killed with what it forked on every path; the run stops at --time-limit.
"""
import argparse
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import Children, write_idx  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def big_mlp_job(directory):
    write_idx(directory, "train", 64 * 80, 1)
    write_idx(directory, "t10k", 64, 2)
    path = os.path.join(directory, "mlp.yaml")
    with open(path, "w") as f:
        f.write(f"data:\n  format: idx\n  directory: {directory}\n  scale: 0.00392156862745098\n"
                "model:\n  - flatten\n  - dense: {units: 4096, activation: relu}\n"
                "  - dense: {units: 4096, activation: relu}\n  - dense: {units: 1024, activation: relu}\n"
                "  - dense: {units: 10}\n"
                "loss: {name: sparse_categorical_crossentropy, from_logits: true}\n"
                "optimizer: {name: adam, learning_rate: 0.0001}\nmetrics: [accuracy]\nepochs: 1\nbatch_size: 64\n")
    return path


def run_job(children, strata, job, workdir, kill_after, restarts):
    """One launch of 3 workers where worker:2's first run kills itself `kill_after` s after it starts training."""
    script = os.path.join(workdir, "worker.sh")
    with open(script, "w") as f:
        f.write("if [ \"$STRATA_LAUNCH_RESTART\" = 0 ] && echo \"$TF_CONFIG\" | grep -q '\"index\": *2'; then "
                f"(sleep {kill_after}; kill -9 $$) & fi; exec {strata} train {job} "
                "--strategy multi_worker_mirrored --threads 1 --epochs 1\n")
    p = children.start([strata, "launch", "--workers", "3", "--min-workers", "2", "--max-restarts", str(restarts),
                        "--", "sh", script])
    out = children.wait_all([p], f"launch ({os.path.basename(job)}, restarts {restarts})")[0]
    return out


def figures(out):
    regroup = [float(x) for x in re.findall(r"\[worker:[01]\] membership: worker:2 left; .* regrouped in ([0-9.]+) s",
                                           out)]
    admit = re.findall(r"\[worker:[01]\] membership: worker:2 joined; .* connected in ([0-9.]+) s, state sent in "
                       r"([0-9.]+) s \(([0-9.]+) MB\)", out)
    steps = re.findall(r"\[worker:(\d)\] training ended after epoch 1 of 1: (\d+) optimizer steps", out)
    return regroup, [(float(a), float(s), float(mb)) for a, s, mb in admit], steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    parser.add_argument("--time-limit", type=float, default=900)
    args = parser.parse_args()
    children = Children(time.monotonic() + args.time_limit)
    print("# elastic training, 3 workers on 127.0.0.1, worker:2 killed (SIGKILL) mid-epoch; heartbeat timeout 10 s")
    print(f"{'model':>12}  {'restart':>7}  {'regroup_s':>9}  {'admit_s':>7}  {'state_s':>7}  {'state_MB':>8}  "
          f"{'steps':>10}")
    try:
        with tempfile.TemporaryDirectory(prefix="strata_elastic_bench_") as tmp:
            cnn = os.path.join(ROOT, "configs", "fashion_mnist_cnn.yaml")
            mlp = big_mlp_job(tmp)
            for name, job, kill_after in (("cnn", cnn, 6), ("mlp_100MB", mlp, 6)):
                for restarts in (0, 1):
                    out = run_job(children, args.strata, job, tmp, kill_after, restarts)
                    regroup, admit, steps = figures(out)
                    if not regroup:
                        print(f"{name:>12}  {restarts:>7}  the kill did not land mid-epoch; output:\n{out[-3000:]}")
                        continue
                    a = admit[0] if admit else (float("nan"),) * 3
                    done = ",".join(f"w{w}:{n}" for w, n in steps)
                    print(f"{name:>12}  {restarts:>7}  {max(regroup):>9.2f}  {a[0]:>7.2f}  {a[1]:>7.2f}  {a[2]:>8.1f}  "
                          f"{done:>10}", flush=True)
    finally:
        children.kill_all()


if __name__ == "__main__":
    main()
