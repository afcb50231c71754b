"""ONNX export against onnxruntime: each config's model, trained for one short epoch by the real `strata` binary on
tiny data, exported with `strata export -o MODEL.onnx` and `-o MODEL.safetensors`; onnxruntime's outputs on the
.onnx file must equal, to 1e-5 (max abs), what `strata predict` gives on the saved model. onnx.checker checks each
file. A job of the layers the configs lack (BatchNormalization, GRU both ways of reset_after, go_backwards,
Dropout, AveragePooling2D, SAME padding, softmax, Conv1D causal and dilated, and strided with SAME padding) runs the
same way, and a functional model (Concatenate, Add, the remaining activations; tests/peers/tool/onnx_export.cc) is compared with strata's own predictions.
The Transformer config (Conv1D, PositionEmbedding, two pre-norm TransformerEncoders with GELU, LayerNormalization,
GlobalAveragePooling1D) trains on the same tiny images; a job of the attention layers it lacks (MultiHeadAttention
with a causal mask, post-norm encoders, LayerNormalization without center or scale, a shorter sequence than
PositionEmbedding holds) runs the same way; attention_mask inputs, which no job file can give, are peers_tool's
onnx-attention model.

The binary is $STRATA_BINARY (ctest's peers_test sets it), else build/strata. The models are the configs' own
`model:` sections; only the CTR model's table is cut from 1M rows to 1000 (its data's vocabulary), so the test
stays small. Thread-safety: pytest runs these one at a time.
"""
import gzip
import os
import re
import struct
import subprocess

import numpy as np
import onnx
import onnxruntime
import pytest

import peers_tool

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STRATA = os.environ.get("STRATA_BINARY") or os.path.join(_ROOT, "build", "strata")
TOLERANCE = 1e-5

# What the configs lack, as a job file's model section: BatchNormalization on images and on rows, SAME padding,
# strides, average pooling, Dropout, Conv1D (causal + dilated, strided + SAME), GRU (reset_after true and false,
# go_backwards), LSTM go_backwards, softmax.
EXTRA_LAYERS_MODEL = """model:
  - conv2d: {filters: 6, kernel_size: 3, strides: 2, padding: same, activation: relu}
  - batch_normalization: {}
  - average_pooling2d: {pool_size: 2, padding: same}
  - dropout: {rate: 0.25}
  - reshape: {target_shape: [7, 42]}
  - conv1d: {filters: 16, kernel_size: 3, padding: causal, dilation_rate: 2, activation: relu}
  - conv1d: {filters: 12, kernel_size: 2, strides: 2, padding: same}
  - gru: {units: 12, return_sequences: true}
  - gru: {units: 12, return_sequences: true, reset_after: false, go_backwards: true}
  - lstm: {units: 10, go_backwards: true}
  - batch_normalization: {}
  - dense: {units: 16, activation: tanh}
  - dense: {units: 10, activation: softmax}
"""

# What the Transformer config lacks: a causal MultiHeadAttention (value_dim and output_shape of its own), a post-norm
# encoder with relu, LayerNormalization without scale or center, a PositionEmbedding longer than the sequence.
ATTENTION_LAYERS_MODEL = """model:
  - reshape: {target_shape: [14, 56]}
  - dense: {units: 16}
  - position_embedding: {sequence_length: 20}
  - multi_head_attention: {num_heads: 2, key_dim: 8, value_dim: 6, output_shape: 12, use_causal_mask: true}
  - layer_normalization: {epsilon: 1e-3, center: false}
  - transformer_encoder: {num_heads: 3, intermediate_dim: 24, normalize_first: false, dropout: 0.2}
  - layer_normalization: {scale: false}
  - global_average_pooling1d
  - dense: {units: 10}
"""


def run(*args):
    done = subprocess.run([STRATA, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"strata {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def model_section(config):
    """The `model:` block of a config file, as its text."""
    with open(os.path.join(_ROOT, "configs", config)) as f:
        text = f.read()
    match = re.search(r"^model:\n(?:[ #].*\n)+", text, re.M)
    assert match, f"configs/{config} has no model: section"
    return match.group(0)


def write_idx(path, array):
    """An IDX file (gzip) of uint8 `array`, as Fashion-MNIST's."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + b"".join(struct.pack(">I", d) for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A tiny Fashion-MNIST-shaped IDX directory and a batch of test images [N, 28, 28, 1] uint8."""
    directory = tmp_path_factory.mktemp("idx")
    rng = np.random.default_rng(7)
    for split, n in (("train", 128), ("t10k", 32)):
        write_idx(directory / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        write_idx(directory / f"{split}-labels-idx1-ubyte.gz", rng.integers(0, 10, (n,)))
    return directory, rng.integers(0, 256, (16, 28, 28, 1)).astype(np.uint8)


@pytest.fixture(scope="module")
def ctr_data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ctr")
    run("data", "ctr", "--output", str(directory), "--examples", "256", "--test-examples", "32", "--vocab", "1000",
        "--features", "26")
    ids = np.random.default_rng(3).integers(0, 1000, (16, 26)).astype(np.int64)
    return directory, ids


def export_and_compare(tmp_path, job_text, x):
    """Trains the job one epoch, exports both formats, and returns onnxruntime's and strata's outputs on x."""
    job = tmp_path / "job.yaml"
    job.write_text(job_text)
    run("train", str(job), "--epochs", "1", "--threads", "1", "--checkpoint-dir", str(tmp_path / "ckpt"))
    for ext in ("onnx", "safetensors"):
        run("export", str(job), "--checkpoint", str(tmp_path / "ckpt"), "-o", str(tmp_path / f"model.{ext}"))
    np.save(tmp_path / "x.npy", x)
    run("predict", str(tmp_path / "model.safetensors"), str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy"))
    strata_outputs = np.load(tmp_path / "y.npy")

    model = onnx.load(str(tmp_path / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    (onnx_outputs,) = session.run(None, {session.get_inputs()[0].name: x})
    return model, onnx_outputs, strata_outputs


def image_job(directory, model):
    return (f"data: {{format: idx, directory: {directory}, shuffle: 0}}\n{model}"
            "loss: {name: sparse_categorical_crossentropy, from_logits: true}\n"
            "optimizer: {name: adam, learning_rate: 0.01}\nbatch_size: 32\nseed: 1\n")


def check_close(name, onnx_outputs, strata_outputs):
    assert onnx_outputs.shape == strata_outputs.shape
    difference = float(np.max(np.abs(onnx_outputs - strata_outputs)))
    print(f"{name}: max |onnxruntime - strata predict| = {difference:.3g}")
    assert difference <= TOLERANCE, name


@pytest.mark.parametrize("config", ["fashion_mnist_cnn.yaml", "fashion_mnist_lstm.yaml"])
def test_image_config_models_match_onnxruntime(tmp_path, images, config):
    directory, x = images
    model, onnx_outputs, strata_outputs = export_and_compare(tmp_path, image_job(directory, model_section(config)), x)
    assert [i.name for i in model.graph.input] == ["input"]
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
    check_close(config, onnx_outputs, strata_outputs)


def test_ctr_config_model_matches_onnxruntime(tmp_path, ctr_data):
    directory, ids = ctr_data
    model = model_section("ctr_embedding.yaml").replace("input_dim: 1000000", "input_dim: 1000")
    job = (f"data: {{format: tfrecord, train: [{directory}/train-*.tfrecord], test: [{directory}/test-*.tfrecord], "
           f"x: ids, x_dtype: int64, x_shape: [26], y: label, shuffle: 0}}\n{model}"
           "loss: binary_crossentropy\noptimizer: {name: adam, learning_rate: 0.01}\nbatch_size: 64\nseed: 1\n")
    onnx_model, onnx_outputs, strata_outputs = export_and_compare(tmp_path, job, ids)
    assert [n.op_type for n in onnx_model.graph.node][:2] == ["Gather", "Flatten"]
    check_close("ctr_embedding.yaml", onnx_outputs, strata_outputs)


def test_extra_layers_match_onnxruntime(tmp_path, images):
    directory, x = images
    model, onnx_outputs, strata_outputs = export_and_compare(tmp_path, image_job(directory, EXTRA_LAYERS_MODEL), x)
    ops = [n.op_type for n in model.graph.node]
    for op in ("Conv", "BatchNormalization", "AveragePool", "Dropout", "GRU", "LSTM", "Softmax"):
        assert op in ops
    check_close("batchnorm/gru/lstm job", onnx_outputs, strata_outputs)
    # Trained batch statistics and softmax rows: the comparison is not of constants.
    assert np.std(strata_outputs) > 1e-3


def test_functional_model_matches_onnxruntime(tmp_path):
    rng = np.random.default_rng(11)
    inputs = {"sequence": rng.normal(size=(7, 6, 5)), "features": rng.normal(size=(7, 8)),
              "image": rng.normal(size=(7, 8, 8, 3))}
    inputs = {k: v.astype(np.float32) for k, v in inputs.items()}
    path = tmp_path / "functional.onnx"
    answer = peers_tool.run("onnx-functional", {"path": str(path), "seed": 5,
                                                "inputs": [peers_tool.tensor(v) for v in inputs.values()]})
    strata_outputs = peers_tool.array(answer)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    ops = {n.op_type for n in model.graph.node}
    assert {"Concat", "Add", "GRU", "LSTM", "Conv", "MaxPool", "AveragePool", "ReduceMean", "Erf"} <= ops
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (onnx_outputs,) = session.run(None, inputs)
    check_close("functional model", onnx_outputs, strata_outputs)


def test_transformer_config_model_matches_onnxruntime(tmp_path, images):
    directory, x = images
    job = image_job(directory, model_section("fashion_mnist_transformer.yaml"))
    model, onnx_outputs, strata_outputs = export_and_compare(tmp_path, job, x)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("LayerNormalization") == 5  # two per pre-norm encoder, and the final one
    assert ops.count("Softmax") == 2 and "Erf" in ops and "Dropout" not in ops
    assert ops[-3:] == ["LayerNormalization", "ReduceMean", "Gemm"]
    check_close("fashion_mnist_transformer.yaml", onnx_outputs, strata_outputs)
    assert np.std(strata_outputs) > 1e-3


def test_attention_layers_match_onnxruntime(tmp_path, images):
    directory, x = images
    model, onnx_outputs, strata_outputs = export_and_compare(tmp_path, image_job(directory, ATTENTION_LAYERS_MODEL), x)
    check_close("attention job", onnx_outputs, strata_outputs)
    initializers = {t.name: list(t.dims) for t in model.graph.initializer}
    causal = [name for name in initializers if name.endswith("/causal_mask")]
    assert len(causal) == 1 and initializers[causal[0]] == [14, 14]
    assert [14, 16] in initializers.values()  # the position table's first 14 of 20 rows
    assert np.std(strata_outputs) > 1e-3


def test_attention_masks_match_onnxruntime(tmp_path):
    rng = np.random.default_rng(13)
    n = 7
    padding = np.ones((n, 5), np.int32)
    for row, length in enumerate(rng.integers(1, 6, n)):  # each row keeps its first `length` keys (at least one)
        padding[row, length:] = 0
    mask = (rng.random((n, 6, 6)) < 0.7).astype(np.float32)
    mask[:, :, 0] = 1.0  # key 0 stays open: with the causal mask, no query is left without a key
    inputs = {"tokens": rng.normal(size=(n, 6, 8)).astype(np.float32),
              "context": rng.normal(size=(n, 5, 8)).astype(np.float32), "padding": padding, "mask": mask}
    path = tmp_path / "attention.onnx"
    answer = peers_tool.run("onnx-attention", {"path": str(path), "seed": 3,
                                               "inputs": [peers_tool.tensor(v) for v in inputs.values()]})
    strata_outputs = peers_tool.array(answer)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (onnx_outputs,) = session.run(None, inputs)
    check_close("attention masks", onnx_outputs, strata_outputs)
    ops = [node.op_type for node in model.graph.node]
    assert ops.count("Where") == 2 and ops.count("Min") == 1 and ops.count("Softmax") == 3
    # The masks matter: without them, onnxruntime's answer is another.
    unmasked = session.run(None, {**inputs, "padding": np.ones_like(padding), "mask": np.ones_like(mask)})[0]
    assert float(np.max(np.abs(unmasked - strata_outputs))) > 1e-3
