#!/usr/bin/python3
"""What tracing costs (issue 21): `strata train` of the tutorial CNN on generated 28x28 images, one epoch of
--steps steps (batch 64), timed without --trace, with a trace whose window holds no step (started, never
recording: what every span pays when tracing is off is this same relaxed load), and with every step recorded.

    /usr/bin/python3 bench/trace_bench.py [--strata build/strata] [--examples 8192] [--rounds 3]

The three runs alternate, --rounds times; the figure per condition is its fastest run's wall time (start-up
included, the same in all three), and the ratios are against the run without --trace. Prints the spans and bytes
the full trace wrote.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import write_idx  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


JOB = """data:
  format: idx
  directory: {dir}
  scale: 0.00392156862745098
  shuffle: 1024
model:
  - conv2d: {{filters: 32, kernel_size: 3, activation: relu}}
  - max_pooling2d: {{pool_size: 2}}
  - flatten
  - dense: {{units: 64, activation: relu}}
  - dense: {{units: 10}}
loss: {{name: sparse_categorical_crossentropy, from_logits: true}}
optimizer: {{name: adam, learning_rate: 0.001}}
metrics: [accuracy]
epochs: 1
batch_size: 64
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata", default=os.path.join(os.environ.get("STRATA_BUILD_DIR", os.path.join(ROOT, "build")), "strata"))
    parser.add_argument("--examples", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strata_trace_bench_") as tmp:
        write_idx(tmp, "train", args.examples, 1)
        write_idx(tmp, "t10k", 256, 2)
        job = os.path.join(tmp, "job.yaml")
        with open(job, "w") as f:
            f.write(JOB.format(dir=tmp))
        trace = os.path.join(tmp, "trace.json")
        conditions = {
            "no --trace": [],
            "trace started, no step in its window": ["--trace", trace, "--trace-steps", "1000000:1000001"],
            "every step recorded": ["--trace", trace, "--trace-steps", "0:1000000"],
        }
        best = {name: float("inf") for name in conditions}
        spans = ""
        for _ in range(args.rounds):
            for name, flags in conditions.items():
                start = time.monotonic()
                out = subprocess.run([args.strata, "train", job, "--verbose", "0"] + flags, capture_output=True,
                                     text=True, timeout=1800)
                elapsed = time.monotonic() - start
                if out.returncode != 0:
                    sys.exit(f"{name}: strata exited {out.returncode}: {out.stderr[-2000:]}")
                best[name] = min(best[name], elapsed)
                if name == "every step recorded":
                    spans = next((l for l in out.stdout.splitlines() if l.startswith("trace: ")), "")
                    spans += f" ({os.path.getsize(trace) / 1e6:.2f} MB)"
        steps = args.examples // 64
        base = best["no --trace"]
        print(f"CNN, {steps} steps of batch 64, best of {args.rounds} runs each (wall time, start-up included)")
        for name, seconds in best.items():
            print(f"  {name:40s} {seconds:7.2f} s  {seconds / base:6.3f}x")
        print(f"  full trace: {spans}")


if __name__ == "__main__":
    main()
