#!/usr/bin/python3
"""Where each thread's time goes in a Chrome trace that strata wrote (distribute_bench --trace FILE, strata train
--trace): per thread row, the milliseconds per step of each span name, and the window's wall time per step.

    /usr/bin/python3 bench/trace_breakdown.py mirrored.json [one_device.json ...]

A synchronous strategy's step is its slowest replica's compute plus what no replica computes in: the wait for the
reduced gradients, an update that one replica runs while the others wait, and the hand-off; comparing a Mirrored
trace with a one-replica trace of the same per-replica batch shows which of those bounds it.
"""
import collections
import json
import sys


def breakdown(path):
    events = json.load(open(path))["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        print(f"== {path}: no spans")
        return
    begin = min(e["ts"] for e in spans)
    end = max(e["ts"] + e["dur"] for e in spans)
    steps = len({e["args"].get("step") for e in spans})
    print(f"== {path}: {steps} steps, {(end - begin) / 1000 / steps:.3f} ms/step wall")
    per_thread = collections.defaultdict(lambda: collections.defaultdict(float))
    for e in spans:
        per_thread[str(names.get(e["tid"], e["tid"]))][e["name"]] += e["dur"] / 1000
    for thread, spans_ms in sorted(per_thread.items()):
        parts = ", ".join(f"{name} {ms / steps:.3f}" for name, ms in sorted(spans_ms.items(), key=lambda x: -x[1]))
        print(f"  {thread}: {parts} | in spans {sum(spans_ms.values()) / steps:.3f} ms/step")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for trace_path in sys.argv[1:]:
        breakdown(trace_path)
