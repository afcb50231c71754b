#!/usr/bin/python3
"""Kill `strata train` with SIGKILL at random moments, resume it each time, and check that it ends with
bitwise the weights (and optimizer slots) of a run never killed.

    scripts/kill_and_resume.py [--job configs/fashion_mnist_cnn.yaml] [--epochs 3] [--kills 10]
                               [--checkpoint-every 100] [--seed S] [--strata build/strata]

First an uninterrupted run writes its checkpoints to WORK/reference; then a run in WORK/killed is started
with --resume again and again, each time killed with SIGKILL after a random delay drawn from what is left
of the training (so the kills fall across every epoch), until --kills kills have landed; a last resume runs
to the end. Each kill is reported with the checkpoint it resumed from. The final checkpoints' model and
optimizer files must be byte for byte the same; the exit status is 0 only then.

With --checkpoint-every N the runs also checkpoint every N steps, so a kill in the middle of an epoch
loses at most N steps and the resume continues mid-epoch; the script checks that every checkpoint left
is at a multiple of N or at an epoch's end, and that at least one resume started mid-epoch.

Every child runs in its own process group, is killed on every way out of this script (an error, Ctrl-C,
SIGTERM, the --time-limit), and none outlives it. Uses only Python's standard library.
"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

children = set()


def kill_children():
    for p in list(children):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        children.discard(p)


def on_signal(signum, _frame):
    kill_children()
    sys.exit(128 + signum)


class Deadline:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("the time limit ran out")
        return left


def train_command(args, checkpoint_dir, resume):
    cmd = [args.strata, "train", args.job, "--epochs", str(args.epochs), "--checkpoint-dir", checkpoint_dir,
           "--verbose", "2"]
    if args.checkpoint_every:
        cmd += ["--checkpoint-every", str(args.checkpoint_every)]
    if resume:
        cmd.append("--resume")
    return cmd


def start(cmd, log):
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    children.add(p)
    return p


def run_to_end(cmd, log_path, deadline):
    with open(log_path, "ab") as log:
        p = start(cmd, log)
        try:
            rc = p.wait(timeout=deadline.left())
        finally:
            kill_children()
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {rc}; see {log_path}:\n" + tail(log_path))


def tail(path, lines=15):
    with open(path, "rb") as f:
        return b"".join(f.readlines()[-lines:]).decode(errors="replace")


def wait_for_line(p, log_path, text, deadline):
    """Waits until the running `p` has written `text` to its log; returns early if it exits."""
    needle = text.encode()
    while p.poll() is None:
        with open(log_path, "rb") as f:
            if needle in f.read():
                return
        deadline.left()
        time.sleep(0.01)


def latest_checkpoint(directory):
    """(path, manifest) of the checkpoint the pointer file names; (None, None) when there is none."""
    pointer = os.path.join(directory, "checkpoint")
    if not os.path.exists(pointer):
        return None, None
    with open(pointer) as f:
        name = json.load(f)["latest"]
    path = os.path.join(directory, name)
    with open(os.path.join(path, "manifest.json")) as f:
        return path, json.load(f)


def position(manifest):
    """(epochs done, step in the epoch, global step) of a checkpoint."""
    if manifest is None:
        return 0, 0, 0
    fit = manifest.get("extra", {}).get("fit", {})
    return fit.get("epochs_done", manifest["epoch"]), fit.get("step_in_epoch", 0), manifest["step"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--strata", default=os.path.join(os.environ.get("STRATA_BUILD_DIR", root + "/build"),
                                                         "strata"))
    parser.add_argument("--job", default=os.path.join(root, "configs", "fashion_mnist_cnn.yaml"))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints (0: epochs)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the kill moments (default: random)")
    parser.add_argument("--work", default=None, help="directory for the runs (default: a new temporary one)")
    parser.add_argument("--time-limit", type=float, default=1800, help="seconds for everything")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    deadline = Deadline(args.time_limit)
    work = args.work or tempfile.mkdtemp(prefix="strata_kill_resume_")
    os.makedirs(work, exist_ok=True)
    reference, killed = os.path.join(work, "reference"), os.path.join(work, "killed")
    print(f"kill-and-resume: {args.job}, {args.epochs} epochs, {args.kills} kills, seed {seed}, in {work}",
          flush=True)

    ref_log = os.path.join(work, "reference.log")
    t0 = time.monotonic()
    run_to_end(train_command(args, reference, False), ref_log, deadline)
    total = time.monotonic() - t0
    _, ref_manifest = latest_checkpoint(reference)
    total_steps = position(ref_manifest)[2]
    epoch_seconds = total / args.epochs  # an upper bound: it includes the start
    print(f"uninterrupted run: {total:.1f} s, {total_steps} steps", flush=True)

    # Kill k of K lands in epoch 1 + k * epochs // K (or the one the run has reached, if later): the run is
    # watched until it prints "Epoch e/N" (at that epoch's start), then killed after a random part of an
    # epoch's time; near the end of an epoch that is during its checkpoint write.
    kills, mid_epoch_resumes, attempts = 0, 0, 0
    log_path = os.path.join(work, "killed.log")
    while kills < args.kills:
        attempts += 1
        if attempts > 3 * args.kills:
            raise RuntimeError(f"only {kills} of {args.kills} kills landed in {attempts - 1} attempts")
        _, manifest = latest_checkpoint(killed)
        epochs_done, in_epoch, step = position(manifest)
        if in_epoch > 0:
            mid_epoch_resumes += 1
        target = max(1 + kills * args.epochs // args.kills, epochs_done + 1)
        delay = rng.uniform(0.0, 1.0) * epoch_seconds
        attempt_log = os.path.join(work, f"attempt-{attempts}.log")
        with open(attempt_log, "wb") as log:
            started = time.monotonic()
            p = start(train_command(args, killed, True), log)
            try:
                wait_for_line(p, attempt_log, f"Epoch {target}/{args.epochs}", deadline)
                p.wait(timeout=min(delay, deadline.left()))
                finished = True
            except subprocess.TimeoutExpired:
                finished = False
            kill_children()
        with open(attempt_log, "rb") as src, open(log_path, "ab") as dst:
            dst.write(src.read())
        if finished:
            if p.returncode != 0:
                raise RuntimeError(f"a resumed run exited with {p.returncode}; see {attempt_log}:\n" +
                                   tail(attempt_log))
            # The reference run's epochs were slower than this one's (a machine busier then): the kills aim at
            # this run's epoch time from now on, or every later one would finish before its kill too.
            epoch_seconds = min(epoch_seconds, (time.monotonic() - started) / max(args.epochs - epochs_done, 1))
            print(f"  attempt {attempts}: finished before the kill; training again from scratch (an epoch now takes "
                  f"at most {epoch_seconds:.1f} s)", flush=True)
            subprocess.run(["rm", "-rf", killed], check=True)
            continue
        kills += 1
        print(f"  kill {kills}: SIGKILL {delay:.2f} s into epoch {target}; that run had resumed from epoch "
              f"{epochs_done + 1} step {in_epoch} (global step {step})", flush=True)

    run_to_end(train_command(args, killed, True), log_path, deadline)
    ref_path, _ = latest_checkpoint(reference)
    got_path, got_manifest = latest_checkpoint(killed)
    ok = True
    for name in ("model.safetensors", "optimizer.safetensors"):
        with open(os.path.join(ref_path, name), "rb") as a, open(os.path.join(got_path, name), "rb") as b:
            same = a.read() == b.read()
        print(f"{name}: {'bitwise equal' if same else 'DIFFERS'} ({ref_path} vs {got_path})", flush=True)
        ok = ok and same
    if position(got_manifest)[2] != total_steps:
        print(f"the resumed run ended at step {position(got_manifest)[2]}, not {total_steps}")
        ok = False
    if args.checkpoint_every:
        for entry in os.listdir(killed):
            m = re.fullmatch(r"ckpt-(\d+)", entry)
            if m:
                with open(os.path.join(killed, entry, "manifest.json")) as f:
                    epochs_done, in_epoch, step = position(json.load(f))
                if step % args.checkpoint_every != 0 and in_epoch != 0:
                    print(f"{entry}: global step {step} is neither a multiple of {args.checkpoint_every} nor an "
                          "epoch's end")
                    ok = False
        if mid_epoch_resumes == 0:
            print("no resume started in the middle of an epoch (try another --seed)")
            ok = False
        else:
            print(f"{mid_epoch_resumes} resume(s) continued in the middle of an epoch", flush=True)
    if not args.work and ok:
        subprocess.run(["rm", "-rf", work], check=True)
    print("kill-and-resume: " + ("PASS" if ok else "FAIL"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, TimeoutError) as e:
        print(f"kill-and-resume: error: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        kill_children()
