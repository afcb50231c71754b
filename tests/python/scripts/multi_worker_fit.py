# A worker of tests/python/test_launch.py's job: fits a small model on fixed data under MultiWorkerMirroredStrategy, or
# with a second argument "pipeline" under PipelineStrategy (2 stages, 4 micro-batches; a pipeline replica per worker)
# (the cluster from the TF_CONFIG `python -m strata.launch` gives it) and prints one JSON line: its task, the loss per
# epoch and the final weights' sums. Thread-safety: a script, one thread.
import json
import sys

import numpy as np

import strata
from strata import layers

if sys.argv[2:] == ["pipeline"]:
    strategy = strata.distribute.experimental.PipelineStrategy(stages=2, micro_batches=4, balance="parameters")
else:
    strategy = strata.distribute.MultiWorkerMirroredStrategy()
strata.utils.set_random_seed(7)
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype(np.float32)
y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
with strategy.scope():
    model = strata.Sequential([layers.Input((8,)), layers.Dense(16, activation="relu"), layers.Dense(2)])
    model.compile(optimizer=strata.optimizers.SGD(learning_rate=0.1),
                  loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
history = model.fit(x, y, epochs=int(sys.argv[1]), batch_size=32, shuffle=False, verbose=0)
print(json.dumps({"worker": strategy.worker_index, "workers": strategy.num_workers,
                  "replicas": strategy.num_replicas_in_sync, "loss": history.history["loss"],
                  "weights": [float(np.sum(w)) for w in model.get_weights()]}), flush=True)
