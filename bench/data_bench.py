#!/usr/bin/python3
"""strata's Fashion-MNIST TFRecord GZIP input pipeline against two raw inflate limits and PyTorch's DataLoader.

Runs the C++ program bench/data_bench (built from data_bench.cc), which times, at 1 and 2 threads:
  raw_inflate     zlib inflating the 4 GZIP shard files of the 60000 training records (written with
                  `strata data convert`'s zlib settings: level 9, filtered) into memory
                  (one file per thread at a time, a 1 MiB output buffer): the issue's limit for these bytes;
  raw_libdeflate  libdeflate inflating each shard file read whole, one gzip member per call: the
                  fastest general decoder here, and the one strata's reader inflates with (target:
                  the pipeline at >= 0.8 of it);
  pipeline        make_example_dataset(shards, GZIP, num_parallel_reads=threads): read, inflate, check CRCs,
                  parse each tf.train.Example, decode the image to uint8 [28, 28, 1], shuffle(10000),
                  batch(64), then map each batch to float32 (/255).
and, as the peer, the same steps in PyTorch 1.13 over the IDX arrays already in memory (no files, no
inflate): a map-style Dataset whose __getitem__ returns (image as uint8 [28, 28, 1], label),
DataLoader(batch_size=64, shuffle=True), then each batch to float32 (/255); 1 thread: num_workers=0,
torch.set_num_threads(1); 2 threads: num_workers=2 (worker processes, each with 1 torch thread). Prints
records/s and the ratios pipeline/raw_inflate (zlib; target >= 0.8), pipeline/raw_libdeflate (the
decoder the pipeline uses; target >= 0.8) and pipeline/torch (target >= 2).

    /usr/bin/python3 bench/data_bench.py [--binary build/bench/data_bench] [--epochs 3] [--rounds 2]

Each side reports its best epoch; rounds alternate strata and torch so that slow spells of a shared
machine hit both. Use /usr/bin/python3 (the one with torch).
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import time

from bench_common import find_binary

IDX_DIR = "/usr/share/datasets/fashion-mnist"


def load_idx(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def torch_worker(threads, epochs, idx_dir):
    """Runs in the child process; prints {"torch": records_per_second} as JSON."""
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1 if threads > 1 else threads)
    images = load_idx(os.path.join(idx_dir, "train-images-idx3-ubyte.gz"))
    labels = load_idx(os.path.join(idx_dir, "train-labels-idx1-ubyte.gz")).astype(np.int64)

    class FashionMnist(Dataset):
        def __len__(self):
            return len(labels)

        def __getitem__(self, i):
            return torch.from_numpy(images[i]).reshape(28, 28, 1), int(labels[i])

    loader = DataLoader(FashionMnist(), batch_size=64, shuffle=True, num_workers=0 if threads == 1 else threads,
                        persistent_workers=threads > 1)
    best = float("inf")
    for epoch in range(epochs + 1):  # the first epoch warms up (and starts the workers)
        torch.manual_seed(epoch)
        start = time.perf_counter()
        n = 0
        for x, y in loader:
            x = x.to(torch.float32).div_(255.0)
            n += x.shape[0]
        if epoch > 0:
            best = min(best, time.perf_counter() - start)
    assert n == len(labels)
    print(json.dumps({"torch": n / best}))


def run_strata(binary, threads, epochs, idx_dir):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    text = subprocess.run([binary, "--threads", str(threads), "--epochs", str(epochs), "--idx", idx_dir], check=True,
                          capture_output=True, text=True, env=env).stdout
    return {k: float(v) for k, v in (line.split("\t") for line in text.splitlines() if line.strip())}


def run_torch(threads, epochs, idx_dir):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    text = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-worker", str(threads), "--epochs",
                           str(epochs), "--idx", idx_dir], check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(text.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", help="path to data_bench (default: build*/bench/data_bench)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of (strata, torch); the best is kept")
    ap.add_argument("--idx", default=IDX_DIR, help="the Fashion-MNIST IDX directory")
    ap.add_argument("--torch-worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        torch_worker(args.torch_worker, args.epochs, args.idx)
        return

    binary = find_binary("data_bench", args.binary)
    print(f"strata: {binary}; best epoch of {args.epochs} per run, best of {args.rounds} rounds; 60000 records")
    header = (f"{'thr':>3} {'zlib raw/s':>11} {'libdeflate/s':>13} {'strata rec/s':>13} {'torch rec/s':>12} "
              f"{'s/zlib':>7} {'s/ldef':>7} {'s/torch':>8}")
    print(header)
    print("-" * len(header))
    for threads in [int(t) for t in args.threads.split(",")]:
        s_runs, t_runs = [], []
        for _ in range(args.rounds):
            s_runs.append(run_strata(binary, threads, args.epochs, args.idx))
            t_runs.append(run_torch(threads, args.epochs, args.idx))
        raw = max(r["raw_inflate"] for r in s_runs)
        ldef = max(r["raw_libdeflate"] for r in s_runs)
        pipe = max(r["pipeline"] for r in s_runs)
        torch_rate = max(r["torch"] for r in t_runs)
        print(f"{threads:>3} {raw:11.0f} {ldef:13.0f} {pipe:13.0f} {torch_rate:12.0f} {pipe / raw:7.2f} "
              f"{pipe / ldef:7.2f} {pipe / torch_rate:8.2f}")
    print()
    print("s/zlib: strata pipeline / zlib inflating the same shards, the issue's raw limit (target >= 0.80);")
    print("s/ldef: strata pipeline / libdeflate inflating the same shards alone (target >= 0.80);")
    print("s/torch: strata pipeline / PyTorch DataLoader over in-memory IDX arrays (target >= 2).")
    print("Ceiling: libdeflate/s is the fastest a library inflates these shards here (ISA-L's isal_inflate measured")
    print("0.84-0.87x of it on them, CRC-32 checked in both; 2026-11-24), and the pipeline also parses, shuffles and")
    print("batches on the same cores: at 2 threads on 2 cores it cannot reach libdeflate/s. The home-made decoder")
    print("removed for issue 22 ran the 2-thread pipeline at 0.93-0.95x of libdeflate/s (it beat libdeflate).")
    print("With libdeflate the 2-thread pipeline runs at about 1.7x its 1-thread rate (1.44 M vs 0.85 M records/s,")
    print("2026-11-25): a reading thread inflates a whole shard before it hands out the shard's first record, so with 4")
    print("shards the inflating and the caller's shuffle and batch overlap less than with a streaming decoder. Readers")
    print("that queue a whole shard of parsed rows ahead (16x the queue) measured 6-10% slower, not faster.")


if __name__ == "__main__":
    main()
