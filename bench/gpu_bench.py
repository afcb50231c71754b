#!/usr/bin/env python3
"""Training step time on one GPU: strata's gpu_bench against PyTorch eager, the models of issue 37's table.

The tutorial CNN (Conv2D 32 3x3 relu -> MaxPool 2 -> Flatten -> Dense 64 relu -> Dense 10) at batch 64 and 1024,
an MLP 784-4096-4096-10 at batch 512, and a ResNet-20-style network on 32x32x3 images at batch 256 (3 stages of 3
basic blocks, 16/32/64 filters, batch norm, stride-2 downsampling with a 1x1 projection shortcut, global average
pool, Dense 10); Adam(1e-3) and cross-entropy from logits, on synthetic data already on the GPU. PyTorch runs each
in fp32 and under torch.autocast("cuda", dtype=torch.bfloat16); strata runs fp32 and under its mixed_bfloat16 policy
(bf16 products and convolutions through cuBLAS and cuDNN, float32 variables; gpu_bench --precisions fp32,bf16).

    python3 bench/gpu_bench.py [--binary PATH/gpu_bench] [--steps 50] [--warmup 10]
        [--models cnn64,cnn1024,mlp512,resnet256] [--json-out FILE] [--torch-device cuda|cpu]

Prints one table: model, batch, strata fp32 ms/step, torch fp32 ms/step, torch/strata (above 1.0: strata is
faster; the issue's target is >= 1.0 on every row), torch bf16 ms/step, strata bf16 ms/step and torch/strata in bf16.
Each side times --steps
steps after --warmup, reading the clock after torch.cuda.synchronize() (strata: after its device has finished).
PyTorch's fp32 runs with TF32 off (--tf32 turns it on), as strata's fp32 does.
Without torch or a CUDA device it prints "no GPU: skipped" and exits 0 (1 with --require-gpu) (--torch-device cpu runs the PyTorch side
on the CPU, to test this script where there is no GPU). Exits 1 when a side failed, after printing the rest.
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import find_binary  # noqa: E402

# --models key -> (table name, batch, one example's shape in strata's NHWC / flat layout)
MODELS = {
    "cnn64": ("tutorial_cnn", 64, (28, 28, 1)),
    "cnn1024": ("tutorial_cnn", 1024, (28, 28, 1)),
    "mlp512": ("mlp_784_4096_4096_10", 512, (784,)),
    "resnet256": ("resnet20", 256, (32, 32, 3)),
}


def build_torch_model(torch, name):
    nn = torch.nn
    if name == "tutorial_cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(13 * 13 * 32, 64), nn.ReLU(), nn.Linear(64, 10))
    if name == "mlp_784_4096_4096_10":
        return nn.Sequential(nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))

    def conv_bn(cin, cout, kernel, stride):
        # Keras's BatchNormalization defaults (momentum 0.99, epsilon 1e-3), as strata's side uses.
        return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2, bias=False),
                             nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01))

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.a = conv_bn(cin, cout, 3, stride)
            self.b = conv_bn(cout, cout, 3, 1)
            self.shortcut = conv_bn(cin, cout, 1, stride) if stride != 1 else nn.Identity()

        def forward(self, x):
            y = self.b(torch.relu(self.a(x)))
            return torch.relu(y + self.shortcut(x))

    layers = [conv_bn(3, 16, 3, 1), nn.ReLU()]
    cin = 16
    for filters in (16, 32, 64):
        for block in range(3):
            layers.append(Block(cin, filters, 2 if block == 0 and filters != 16 else 1))
            cin = filters
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def time_torch(torch, key, device, bf16, steps, warmup):
    """ms per training step of one model in PyTorch eager."""
    name, batch, shape = MODELS[key]
    torch.manual_seed(0)
    model = build_torch_model(torch, name).to(device)
    # PyTorch's layout: channels first for images.
    x_shape = (batch, shape[2], shape[0], shape[1]) if len(shape) == 3 else (batch,) + shape
    x = torch.randn(x_shape, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    sync()
    seconds = time.perf_counter() - t0
    if not torch.isfinite(loss).item():
        raise RuntimeError(f"{key}: the loss is not finite")
    return 1e3 * seconds / steps


def run_strata(binary, keys, steps, warmup, timeout):
    """strata's ms per step by --models key, or an error message."""
    cmd = [binary, "--device", "gpu", "--json", "--steps", str(steps), "--warmup", str(warmup),
           "--models", ",".join(keys), "--precisions", "fp32,bf16"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        # The models that finished before the limit still count.
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return parse_lines(out), f"{binary} took over {timeout} s; killed"
    except OSError as e:
        return {}, f"{binary}: {e}"
    error = None if p.returncode == 0 else f"{binary} exited {p.returncode}: {p.stderr.strip()[-1500:]}"
    return parse_lines(p.stdout), error


def parse_lines(stdout):
    """gpu_bench --json's objects by (--models key, precision)."""
    results = {}
    for line in stdout.splitlines():
        if line.startswith("{") and line.rstrip().endswith("}"):
            r = json.loads(line)
            results[(r["key"], r.get("precision", "fp32"))] = r
    return results


def fmt(ms):
    return f"{ms:.3f}" if isinstance(ms, float) else ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", help="strata's gpu_bench (default: a build*/bench/gpu_bench of this checkout)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--json-out", help="also write every figure here, one JSON object per model")
    ap.add_argument("--torch-device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: the PyTorch side only, on the CPU (tests this script without a GPU)")
    ap.add_argument("--timeout", type=float, default=240, help="seconds strata's gpu_bench may take")
    ap.add_argument("--require-gpu", action="store_true",
                    help="exit 1, not 0, when PyTorch or its CUDA device is missing (scripts/gpu_check.sh on a GPU machine)")
    ap.add_argument("--tf32", action="store_true",
                    help="let PyTorch's fp32 use TF32 (its cuDNN default); off by default, as strata's fp32 is")
    args = ap.parse_args()
    keys = [k for k in args.models.split(",") if k]
    for k in keys:
        if k not in MODELS:
            sys.exit(f"unknown model '{k}' (known: {', '.join(MODELS)})")

    try:
        import torch
    except ImportError:
        print("no GPU: skipped (PyTorch is not installed here)")
        return 1 if args.require_gpu else 0
    on_gpu = args.torch_device == "cuda"
    if on_gpu and not torch.cuda.is_available():
        print("no GPU: skipped (torch.cuda.is_available() is False)")
        return 1 if args.require_gpu else 0

    failures = []
    if on_gpu:
        print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}; "
              f"{args.steps} timed steps after {args.warmup}; TF32 {'on' if args.tf32 else 'off'}", flush=True)
        # TF32 off unless --tf32, as strata's fp32 default (issue 37): both sides compute in true fp32.
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
    rows = {}
    for k in keys:
        rows[k] = {"model": MODELS[k][0], "batch": MODELS[k][1]}
        for precision in ("fp32", "bf16"):
            try:
                rows[k][f"torch_{precision}_ms"] = time_torch(torch, k, args.torch_device, precision == "bf16",
                                                              args.steps, args.warmup)
            except Exception as e:  # noqa: BLE001: one model's failure is reported, the rest still run
                rows[k][f"torch_{precision}_ms"] = "failed"
                failures.append(f"torch {k} {precision}: {e}")
        print(f"  torch {k}: fp32 {fmt(rows[k]['torch_fp32_ms'])} ms, bf16 {fmt(rows[k]['torch_bf16_ms'])} ms",
              flush=True)

    if on_gpu:
        binary = find_binary("gpu_bench", args.binary)
        strata, error = run_strata(binary, keys, args.steps, args.warmup, args.timeout)
        if error:
            failures.append(f"strata: {error}")
    else:
        strata = {}
    for k in keys:
        for precision, ratio in (("fp32", "torch_over_strata"), ("bf16", "torch_over_strata_bf16")):
            s = strata.get((k, precision))
            ms = s["ms_per_step"] if s else ("failed" if on_gpu else "-")
            rows[k][f"strata_{precision}_ms"] = ms
            t = rows[k][f"torch_{precision}_ms"]
            rows[k][ratio] = t / ms if isinstance(t, float) and isinstance(ms, float) else "-"

    def ratio(r, key):
        return f"{r[key]:.2f}" if isinstance(r[key], float) else "-"

    head = ["model", "batch", "strata fp32 ms", "torch fp32 ms", "torch/strata", "strata bf16 ms", "torch bf16 ms",
            "torch/strata bf16"]
    table = [head] + [[r["model"], str(r["batch"]), fmt(r["strata_fp32_ms"]), fmt(r["torch_fp32_ms"]),
                       ratio(r, "torch_over_strata"), fmt(r["strata_bf16_ms"]), fmt(r["torch_bf16_ms"]),
                       ratio(r, "torch_over_strata_bf16")] for r in rows.values()]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    print()
    for row in table:
        print("  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    print("torch/strata above 1.00: strata's step is the faster (issue 37's target: >= 1.00 on every row)")
    if args.json_out:
        with open(args.json_out, "w") as f:
            for r in rows.values():
                f.write(json.dumps(r) + "\n")
    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
