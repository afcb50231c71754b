"""The peers the benches measure strata against, found and run the same way in every bench. Imported, never run.

  tf      TensorFlow (tensorflow-cpu 2.x with Keras 3), in the peers' environment (scripts/peers_env.sh --bench);
  torch   PyTorch 2, in the same environment;
  torch1  Debian's PyTorch 1.13 (package python3-torch, under /usr/bin/python3), kept only where a bench says it adds
          something.
Each peer runs in a child process of its own Python (`Peer.python`), started with `env(threads)` so that its thread
pools are pinned before the library loads; the child then calls `pin_tf(threads)` or `pin_torch(threads)`. A peer
that is missing is skipped with `Peer.why` printed, never replaced by another.

Thread pinning, the same in every bench:
  TensorFlow  tf.config.threading.set_intra_op_parallelism_threads(n) and set_inter_op_parallelism_threads(1) (the
              models are chains of ops: one op at a time, each on n threads, as strata and PyTorch run them);
              OMP_NUM_THREADS=n, OPENBLAS_NUM_THREADS=1, MKL_NUM_THREADS=n; tf.data's own pool as each bench says.
  PyTorch     torch.set_num_threads(n), torch.set_num_interop_threads(1); OMP_NUM_THREADS=n, MKL_NUM_THREADS=n,
              OPENBLAS_NUM_THREADS=1 (OpenBLAS's pthread pool ignores OpenMP's settings; beside OpenMP's it
              oversubscribed the cores).
Thread-safety: a module of functions; the probe cache is per process.
"""
import functools
import gzip
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEBIAN_PYTHON = "/usr/bin/python3"
LABELS = {"tf": "TensorFlow", "torch": "PyTorch", "torch1": "PyTorch (Debian)"}
MODULES = {"tf": "tensorflow", "torch": "torch", "torch1": "torch"}


def peers_python():
    """bin/peer-python of $STRATA_PEERS_VENV or of .venv-peers in the checkout (scripts/peers_env.sh writes it)."""
    venv = os.environ.get("STRATA_PEERS_VENV") or os.path.join(REPO, ".venv-peers")
    return os.path.join(venv, "bin", "peer-python")


class Peer:
    """One peer: `ok` with `version`, or not with `why`. `label` names its column ("TensorFlow 2.21.0")."""

    def __init__(self, key, python, why=None):
        self.key, self.python = key, python
        self.version, self.why = None, why
        if why is None:
            self.version, self.why = _probe(python, MODULES[key])
        if key == "torch" and self.version and int(self.version.split(".")[0]) < 2:
            self.version, self.why = None, f"{python} has torch {self.version}, not PyTorch 2"
        self.ok = self.version is not None
        self.label = f"{LABELS[key]} {self.version}" if self.ok else LABELS[key]

    def skip_line(self):
        return f"# {self.label} column skipped: {self.why}"


@functools.lru_cache(maxsize=None)
def _probe(python, module):
    """(version, None) when `python` imports `module`; (None, why) otherwise."""
    if not os.path.exists(python):
        return None, f"{python} not found (scripts/peers_env.sh --bench makes it)"
    try:
        r = subprocess.run([python, "-c", f"import {module}; print({module}.__version__)"], capture_output=True,
                           text=True, timeout=120, env=env(1))
    except subprocess.TimeoutExpired:
        return None, f"{python} -c 'import {module}' took over 120 s"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]
        return None, f"{python} cannot import {module}: {last}"
    return r.stdout.strip().splitlines()[-1], None


def add_arguments(parser, debian_torch=False):
    """--peer-python, --no-tf, --no-torch (and --no-debian-torch where the bench has that column)."""
    parser.add_argument("--peer-python", default=None,
                        help="Python of the peers' environment (default: .venv-peers/bin/peer-python)")
    parser.add_argument("--no-tf", action="store_true", help="skip the TensorFlow column")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch 2 column")
    if debian_torch:
        parser.add_argument("--no-debian-torch", action="store_true",
                            help=f"skip the column of Debian's PyTorch 1.13 ({DEBIAN_PYTHON})")


def find(args, debian_torch=False):
    """{"tf": Peer, "torch": Peer[, "torch1": Peer]} as the arguments of add_arguments ask; prints a line for each
    peer that is skipped, and the versions of the others."""
    python = args.peer_python or peers_python()
    found = {"tf": Peer("tf", python, "--no-tf" if args.no_tf else None),
             "torch": Peer("torch", python, "--no-torch" if args.no_torch else None)}
    if debian_torch:
        found["torch1"] = Peer("torch1", DEBIAN_PYTHON, "--no-debian-torch" if args.no_debian_torch else None)
    for p in found.values():
        print(f"# peer: {p.label} ({p.python})" if p.ok else p.skip_line(), flush=True)
    return found


def env(threads, **extra):
    """The environment of a peer's (or strata's) child process at `threads` threads."""
    e = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS=str(threads),
             TF_CPP_MIN_LOG_LEVEL="2")
    e.pop("TF_CONFIG", None)
    e.update(extra)
    return e


def pin_tf(threads):
    """In a TensorFlow child, before any op runs: `threads` intra-op threads, one op at a time."""
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def pin_torch(threads):
    import torch
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set (a second call in one process)
        pass


def run_json(cmd, env, timeout=900):
    """Runs `cmd` and returns the last line of its output that is a JSON object; exits naming the command and the
    end of its error output when it fails."""
    import json
    import sys
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        sys.exit(f"{os.path.basename(cmd[0])} {' '.join(cmd[1:4])}: over {timeout} s; killed")
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit status {r.returncode}:\n{r.stderr.strip()[-3000:]}")
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    sys.exit(f"{' '.join(cmd)}: no JSON line in its output:\n{r.stdout[-2000:]}")


def ratio(a, b, fmt="{:.2f}"):
    """a / b formatted, or "-" when either is missing."""
    return fmt.format(a / b) if a and b else "-"


# ------------------------------------------------------------------------ the models and data the peers share

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    import numpy as np
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion_mnist(data_dir, split="train"):
    """(images as float32 [N, 28, 28, 1] scaled to [0, 1], labels as int64 [N])."""
    import numpy as np
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(f"{data_dir}/{prefix}-images-idx3-ubyte.gz").astype(np.float32).reshape(-1, 28, 28, 1) / 255.0
    y = read_idx(f"{data_dir}/{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    return x, y


def keras_model(name):
    """The Keras tutorial CNN (Conv2D 32 3x3 relu, MaxPool 2, Flatten, Dense 64 relu, Dense 10), the 784-128-10
    MLP or the Transformer of configs/fashion_mnist_transformer.yaml (keras_transformer), compiled with Adam(1e-3) and sparse categorical cross-entropy from logits, the accuracy metric, and Keras's
    default jit_compile="auto" (which Keras 3 turns off on a CPU-only machine and under tf.distribute)."""
    import keras
    if name == "mlp":
        model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(128, activation="relu"),
                                  keras.layers.Dense(10)])
    elif name == "transformer":
        model = keras_transformer()
    else:
        model = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(32, 3, activation="relu"),
                                  keras.layers.MaxPooling2D(2), keras.layers.Flatten(),
                                  keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def keras_timed_fit(model, dataset, steps, warmup_steps):
    """Runs fit for `warmup_steps` then `steps` steps of `dataset` (repeated) in one epoch and returns the seconds of
    the last `steps`, timed from the start of step `warmup_steps` to the end of the epoch."""
    import time

    import keras

    class Timer(keras.callbacks.Callback):
        start = end = None

        def on_train_batch_begin(self, batch, logs=None):
            if batch == warmup_steps:
                Timer.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            Timer.end = time.perf_counter()

    model.fit(dataset.repeat(), epochs=1, steps_per_epoch=warmup_steps + steps, callbacks=[Timer()], verbose=0)
    return Timer.end - Timer.start


# The Transformer of configs/fashion_mnist_transformer.yaml, as strata's layers compute it: 28 rows as 28 tokens of
# 28 features, Conv1D(64, 3, same), a learned position embedding added, 2 pre-norm encoder blocks in keras_hub's
# TransformerEncoder shape (LN -> self-attention 4 heads of 16 with dropout on the scores -> dropout -> residual;
# LN -> Dense(128, gelu) -> Dense(64) -> dropout -> residual; dropout 0.1, LN epsilon 1e-5), a final LN (1e-6), the
# tokens' mean and Dense(10).
TRANSFORMER = {"tokens": 28, "features": 28, "hidden": 64, "heads": 4, "intermediate": 128, "blocks": 2,
               "dropout": 0.1}


def keras_transformer():
    import keras
    from keras import layers
    t = TRANSFORMER

    class PositionEmbedding(layers.Layer):
        def build(self, input_shape):
            self.embeddings = self.add_weight(shape=(t["tokens"], t["hidden"]), initializer="glorot_uniform")

        def call(self, x):
            return x + keras.ops.cast(self.embeddings, x.dtype)

    inputs = keras.Input((28, 28, 1))
    x = layers.Reshape((t["tokens"], t["features"]))(inputs)
    x = layers.Conv1D(t["hidden"], 3, padding="same")(x)
    x = PositionEmbedding()(x)
    for _ in range(t["blocks"]):
        h = layers.LayerNormalization(epsilon=1e-5)(x)
        h = layers.MultiHeadAttention(t["heads"], t["hidden"] // t["heads"], dropout=t["dropout"])(h, h)
        x = layers.Add()([layers.Dropout(t["dropout"])(h), x])
        h = layers.LayerNormalization(epsilon=1e-5)(x)
        h = layers.Dense(t["intermediate"], activation="gelu")(h)
        h = layers.Dense(t["hidden"])(h)
        x = layers.Add()([layers.Dropout(t["dropout"])(h), x])
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    x = layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, layers.Dense(10)(x))


def torch_transformer():
    import torch
    import torch.nn as nn
    t = TRANSFORMER

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm = nn.LayerNorm(t["hidden"], eps=1e-5)
            self.attention = nn.MultiheadAttention(t["hidden"], t["heads"], dropout=t["dropout"], batch_first=True)
            self.feedforward_norm = nn.LayerNorm(t["hidden"], eps=1e-5)
            self.feedforward = nn.Sequential(nn.Linear(t["hidden"], t["intermediate"]), nn.GELU(),
                                             nn.Linear(t["intermediate"], t["hidden"]))
            self.dropout = nn.Dropout(t["dropout"])

        def forward(self, x):
            h = self.attention_norm(x)
            x = x + self.dropout(self.attention(h, h, h, need_weights=False)[0])
            return x + self.dropout(self.feedforward(self.feedforward_norm(x)))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv1d(t["features"], t["hidden"], 3, padding=1)
            self.position = nn.Parameter(torch.randn(t["tokens"], t["hidden"]) * 0.1)
            self.blocks = nn.Sequential(*[Block() for _ in range(t["blocks"])])
            self.norm = nn.LayerNorm(t["hidden"], eps=1e-6)
            self.head = nn.Linear(t["hidden"], 10)

        def forward(self, images):  # [b, 1, 28, 28]: rows are tokens
            x = self.stem(images.reshape(-1, t["tokens"], t["features"]).transpose(1, 2)).transpose(1, 2)
            x = self.blocks(x + self.position)
            return self.head(self.norm(x).mean(dim=1))

    return Transformer()


def torch_model(name):
    import torch.nn as nn
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    if name == "transformer":
        return torch_transformer()
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(5408, 64), nn.ReLU(),
                         nn.Linear(64, 10))
