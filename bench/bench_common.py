"""Helpers the peer benchmarks share: finding a built benchmark binary, starting child processes that are
killed with everything they forked on every path, and writing random IDX data sets. Imported, never run."""
import glob
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_binary(name, path=None):
    """`path` when given; else $STRATA_BUILD_DIR/bench/NAME, build/bench/NAME, then any build*/bench/NAME."""
    if path:
        return path
    candidates = []
    if os.environ.get("STRATA_BUILD_DIR"):
        candidates.append(os.path.join(os.environ["STRATA_BUILD_DIR"], "bench", name))
    candidates.append(os.path.join(REPO, "build", "bench", name))
    candidates += sorted(glob.glob(os.path.join(REPO, "build*", "bench", name)))
    for c in candidates:
        if os.path.exists(c):
            return c
    sys.exit(f"{name} not found; build it (cmake --build build --target {name}) or pass --binary")


def write_idx(directory, prefix, n, seed):
    """n random 28x28 images and labels in the IDX format, as a job's `format: idx` reads them."""
    rng = random.Random(seed)
    with open(os.path.join(directory, prefix + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28))
        f.write(bytes(rng.getrandbits(8) for _ in range(n * 784)))
    with open(os.path.join(directory, prefix + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n))
        f.write(bytes(rng.randrange(10) for _ in range(n)))


class Children:
    """Every process this run starts, each the leader of its own session, so that killing its process group
    also kills what it forked (comm_bench's ranks)."""

    def __init__(self, deadline):
        self.procs = []
        self.deadline = deadline

    def start(self, cmd, env=None):
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def wait_all(self, procs, what):
        """Waits for `procs` until the overall deadline; returns their stdout. Raises on failure or timeout."""
        outs = []
        for p in procs:
            left = self.deadline - time.monotonic()
            try:
                out, err = p.communicate(timeout=max(left, 0.1))
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{what}: over the time limit; killed")
            if p.returncode != 0:
                raise RuntimeError(f"{what}: {p.args[0]} exited {p.returncode}: {err.strip()[-2000:]}")
            outs.append(out)
        return outs

    def kill_all(self):
        for p in self.procs:
            # Only while p runs (unreaped, its pid cannot be reused): a child that has exited (mpirun, comm_bench)
            # waited for its ranks first.
            if p.poll() is None:
                kill_session(p.pid)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()


def kill_session(sid):
    """SIGKILLs every process of session `sid` (a child started with start_new_session is its leader): its process
    group, and the processes that moved to groups of their own inside it (mpirun starts each rank in its own group).
    Repeats until none is left, in case one forked meanwhile."""
    for _ in range(20):
        try:
            os.killpg(sid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        left = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp session ...
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                left.append(int(entry))
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
