#!/usr/bin/env bash
# ctest's peers_test: runs the compatibility tests of tests/peers (pytest, one process, so TensorFlow is imported once)
# in the peers' virtual environment ($STRATA_PEERS_VENV, or .venv-peers in the checkout) against PEERS_TOOL.
#   tests/peers/run_peers_tests.sh PEERS_TOOL [pytest arguments...]
set -euo pipefail

tool="$1"
shift
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${STRATA_PEERS_VENV:-$root/.venv-peers}"
if ! "$venv/bin/python" -c "import pytest, tensorflow, tensorboard, safetensors, onnxruntime, onnx" 2>/dev/null; then
  echo "peers_test: the peers' virtual environment $venv lacks pytest, TensorFlow, TensorBoard, safetensors," \
    "onnxruntime or onnx:" \
    "run scripts/peers_env.sh --tests" >&2
  exit 1
fi
# TensorFlow on the CPU, quietly: no GPU probing, no C++ info logs, no deprecation warnings from inside the peers.
# -p no:cacheprovider: nothing written to the tree.
export PEERS_TOOL="$tool" TF_CPP_MIN_LOG_LEVEL=2 CUDA_VISIBLE_DEVICES="" PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" -m pytest -p no:cacheprovider -W ignore::DeprecationWarning -q "$root/tests/peers" "$@"
