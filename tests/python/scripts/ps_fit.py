# A task of tests/python/test_parameter_server.py's job (chief, workers and ps from the TF_CONFIG that
# `python -m strata.launch --chief --workers N --ps M` gives): a ps task serves as TensorFlow's do (Server, join); the
# chief and each worker make ParameterServerStrategy from TFConfigClusterResolver and the same model under its scope;
# the chief fits (Keras's way, with steps_per_epoch) and prints one JSON line: its loss per epoch, its accuracy on the
# data, the final weights and where the steps ran; a worker's fit serves the chief's steps on its own input.
# Thread-safety: a script, one thread.
import json
import sys

import numpy as np

import strata
from strata import layers

EPOCHS, STEPS = int(sys.argv[1]), int(sys.argv[2])
SHARDS = int(sys.argv[3]) if len(sys.argv) > 3 else 0  # each variable in this many shards; 0: the default partitioner
resolver = strata.distribute.cluster_resolver.TFConfigClusterResolver()
if resolver.task_type == "ps":
    server = strata.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                      task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc")
    server.join()  # until the launcher stops this task
    sys.exit(0)

partitioner = strata.distribute.experimental.partitioners.FixedShardsPartitioner(SHARDS) if SHARDS else None
strategy = strata.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
strata.utils.set_random_seed(7)
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype(np.float32)
y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
with strategy.scope():
    model = strata.Sequential([layers.Input((8,)), layers.Dense(16, activation="relu"), layers.Dense(2)])
    model.compile(optimizer=strata.optimizers.SGD(learning_rate=0.1),
                  loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
# Each worker reads the data in order (a worker's input restarts at its end); the chief reads none.
dataset = strata.data.Dataset.from_tensor_slices((x, y)).batch(32)
history = model.fit(dataset, epochs=EPOCHS, steps_per_epoch=STEPS, verbose=0)
if resolver.task_type == "chief":
    _, accuracy = model.evaluate(x, y, verbose=0)
    print(json.dumps({"loss": history.history["loss"], "accuracy": accuracy, "workers": strategy.num_workers,
                      "ps": strategy.num_ps, "weights": [w.tolist() for w in model.get_weights()],
                      "worker_status": strategy.worker_status()}), flush=True)
else:
    print(json.dumps({"served": history.history}), flush=True)
