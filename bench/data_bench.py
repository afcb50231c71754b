#!/usr/bin/env python3
"""strata's Fashion-MNIST TFRecord GZIP input pipeline against two raw inflate limits, tf.data and PyTorch 2's DataLoader.

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
Beside it, in the same run:
  tf.data         the same shard files and steps in TensorFlow: TFRecordDataset(files, "GZIP",
                  num_parallel_reads=threads), map(parse_single_example + decode_raw + reshape,
                  num_parallel_calls=threads), shuffle(10000), batch(64), map(cast to float32 / 255), prefetch(AUTOTUNE)
                  ("tf rec", strata's order of steps); and TensorFlow's vectorised form, shuffle(10000) and batch(64) of
                  the serialized records, then map(parse_example + decode_raw + cast) on whole batches, prefetch
                  ("tf vec"). tf.data's private pool has `threads` threads, each op's own parallelism 1, and
                  TensorFlow's intra-op pool `threads` (peers.py); the ratio s/tf is against the faster of the two;
  PyTorch 2       the same steps over the IDX arrays already in memory (no files, no inflate): a map-style Dataset
                  whose __getitem__ returns (image as uint8 [28, 28, 1], label), DataLoader(batch_size=64,
                  shuffle=True), then each batch to float32 (/255); 1 thread: num_workers=0,
                  torch.set_num_threads(1); 2 threads: num_workers=2 (worker processes, each with 1 torch thread).
Prints records/s and the ratios pipeline/raw_inflate (zlib; target >= 0.8), pipeline/raw_libdeflate (the decoder the
pipeline uses; target >= 0.8), pipeline/tf.data and pipeline/torch (target >= 2). Debian's PyTorch 1.13 column is
gone: its DataLoader is the same Python loop, so it added nothing here.

    .venv-peers/bin/peer-python bench/data_bench.py [--binary build/bench/data_bench] [--epochs 2] [--rounds 1]
        [--no-tf] [--no-torch]

Every side times --epochs epochs after a warm-up epoch and reports its best; rounds alternate the sides so that slow
spells of a shared machine hit all of them.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import time

import glob
import tempfile

import peers
from bench_common import find_binary

IDX_DIR = "/usr/share/datasets/fashion-mnist"
# data_bench's default shard directory (the shards are written there once, by the first strata run).
SHARDS = os.path.join(tempfile.gettempdir(), "strata_data_bench_plain_gzip")


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

    peers.pin_torch(1)
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


def tf_worker(threads, epochs, shards):
    """Runs in the child process; prints {"tf_record": records/s, "tf_vectorised": records/s} as JSON."""
    peers.pin_tf(threads)
    import tensorflow as tf

    files = sorted(glob.glob(os.path.join(shards, "train-*-of-*.tfrecord.gz")))
    if not files:
        raise SystemExit(f"no train-*.tfrecord.gz shards in {shards}")
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    options.threading.max_intra_op_parallelism = 1

    def parse_one(record):
        ex = tf.io.parse_single_example(record, spec)
        return tf.reshape(tf.io.decode_raw(ex["image"], tf.uint8), [28, 28, 1]), ex["label"]

    def parse_batch(records):
        ex = tf.io.parse_example(records, spec)
        image = tf.reshape(tf.io.decode_raw(ex["image"], tf.uint8), [-1, 28, 28, 1])
        return tf.cast(image, tf.float32) / 255.0, ex["label"]

    def per_record(seed):
        return (tf.data.TFRecordDataset(files, "GZIP", num_parallel_reads=threads)
                .map(parse_one, num_parallel_calls=threads).shuffle(10000, seed=seed).batch(64)
                .map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y)).prefetch(tf.data.AUTOTUNE).with_options(options))

    def vectorised(seed):
        return (tf.data.TFRecordDataset(files, "GZIP", num_parallel_reads=threads).shuffle(10000, seed=seed)
                .batch(64).map(parse_batch, num_parallel_calls=threads).prefetch(tf.data.AUTOTUNE)
                .with_options(options))

    out = {}
    for name, make in (("tf_record", per_record), ("tf_vectorised", vectorised)):
        best = float("inf")
        for epoch in range(epochs + 1):  # the first epoch warms up (tracing, the page cache)
            start = time.perf_counter()
            n = 0
            for x, _ in make(epoch):
                n += int(x.shape[0])
            if epoch > 0:
                best = min(best, time.perf_counter() - start)
        if n != 60000:
            raise SystemExit(f"tf.data read {n} records, expected 60000")
        out[name] = n / best
    print(json.dumps(out))


def run_strata(binary, threads, epochs, idx_dir):
    env = peers.env(1)
    text = subprocess.run([binary, "--threads", str(threads), "--epochs", str(epochs), "--idx", idx_dir, "--shards",
                           SHARDS], check=True, capture_output=True, text=True, env=env).stdout
    return {k: float(v) for k, v in (line.split("\t") for line in text.splitlines() if line.strip())}


def run_peer(peer, threads, epochs, idx_dir):
    # PyTorch's loader runs on one torch thread (its workers are the parallelism); TensorFlow's pools take `threads`.
    env = peers.env(threads if peer.key == "tf" else 1)
    return peers.run_json([peer.python, os.path.abspath(__file__), f"--{peer.key}-worker", str(threads), "--epochs",
                           str(epochs), "--idx", idx_dir], env)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", help="path to data_bench (default: build*/bench/data_bench)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1, help="rounds of every side; the best is kept")
    ap.add_argument("--idx", default=IDX_DIR, help="the Fashion-MNIST IDX directory")
    ap.add_argument("--torch-worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tf-worker", type=int, help=argparse.SUPPRESS)
    peers.add_arguments(ap)
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(args.torch_worker, args.epochs, args.idx)
    if args.tf_worker:
        return tf_worker(args.tf_worker, args.epochs, SHARDS)

    binary = find_binary("data_bench", args.binary)
    found = peers.find(args)
    tf_ok, torch_ok = found["tf"].ok, found["torch"].ok
    print(f"strata: {binary}; best epoch of {args.epochs} per run, best of {args.rounds} rounds; 60000 records; "
          f"shards in {SHARDS}")
    header = (f"{'thr':>3} {'zlib raw/s':>11} {'libdeflate/s':>13} {'strata rec/s':>13} {'tf rec/s':>10} "
              f"{'tf vec/s':>10} {'torch rec/s':>12} {'s/zlib':>7} {'s/ldef':>7} {'s/tf':>6} {'s/torch':>8}")
    print(header)
    print("-" * len(header))
    for threads in [int(t) for t in args.threads.split(",")]:
        s_runs, tf_runs, t_runs = [], [], []
        for _ in range(args.rounds):
            s_runs.append(run_strata(binary, threads, args.epochs, args.idx))
            if tf_ok:
                tf_runs.append(run_peer(found["tf"], threads, args.epochs, args.idx))
            if torch_ok:
                t_runs.append(run_peer(found["torch"], threads, args.epochs, args.idx))
        raw = max(r["raw_inflate"] for r in s_runs)
        ldef = max(r["raw_libdeflate"] for r in s_runs)
        pipe = max(r["pipeline"] for r in s_runs)
        tf_rec = max((r["tf_record"] for r in tf_runs), default=None)
        tf_vec = max((r["tf_vectorised"] for r in tf_runs), default=None)
        tf_best = max(tf_rec, tf_vec) if tf_runs else None
        torch_rate = max((r["torch"] for r in t_runs), default=None)
        cell = lambda v, w: f"{v:{w}.0f}" if v else f"{'-':>{w}}"
        print(f"{threads:>3} {raw:11.0f} {ldef:13.0f} {pipe:13.0f} {cell(tf_rec, 10)} {cell(tf_vec, 10)} "
              f"{cell(torch_rate, 12)} {pipe / raw:7.2f} {pipe / ldef:7.2f} {peers.ratio(pipe, tf_best):>6} "
              f"{peers.ratio(pipe, torch_rate):>8}", flush=True)
    print()
    print("s/zlib: strata pipeline / zlib inflating the same shards, the issue's raw limit (target >= 0.80);")
    print("s/ldef: strata pipeline / libdeflate inflating the same shards alone (target >= 0.80);")
    print("s/tf: strata pipeline / the faster of tf rec (strata's order: parse each record, then shuffle and batch) and")
    print("  tf vec (shuffle and batch the serialized records, then parse whole batches) on the same shard files;")
    print("s/torch: strata pipeline / PyTorch 2 DataLoader over in-memory IDX arrays (target >= 2).")
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
