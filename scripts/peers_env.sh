#!/usr/bin/env bash
# Makes the virtual environment of the peers and independent readers, never touching the build or the system Python:
#   scripts/peers_env.sh --tests   TensorFlow (tensorflow-cpu, with Keras 3 and TensorBoard), safetensors, pytest,
#                                  onnxruntime and onnx (its checker): what the `peers` tests (tests/peers) run with,
#                                  read and compare with; nanobind, scikit-build-core and numpy: the Python package's
#                                  build and tests (tests/python)
#   scripts/peers_env.sh --bench   the same, plus PyTorch 2 for the benches' PyTorch column
# The environment is $STRATA_PEERS_VENV, or .venv-peers in the checkout. Its bin/peer-python runs Python there with
# what PyTorch needs on this machine (below). Idempotent: what is installed is not asked for again.
#
# PyTorch: PyPI's Linux wheel of torch 2 is a CUDA build whose requirements pull several GB of CUDA packages. It is
# installed with --no-deps plus its pure-Python needs and the four CUDA libraries the CUDA toolkit under
# /usr/local/cuda lacks (cuSPARSELt, NVSHMEM, cuFile, a newer NCCL); the rest (cudart, cuBLAS, cuDNN) come from that
# toolkit. With no driver here, libcuda.so.1 is the toolkit's stub: torch.cuda.is_available() is False, and torch
# runs on the CPU.
set -euo pipefail

mode="${1:---tests}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${STRATA_PEERS_VENV:-$root/.venv-peers}"

# nanobind, scikit-build-core, numpy: the Python package (python/) is built for this venv's Python and tested in it.
tests_requirements=(tensorflow-cpu==2.21.* tensorboard==2.21.* safetensors pytest onnxruntime onnx nanobind
  scikit-build-core numpy)
# (--no-deps: so each pure-Python need's own needs are listed too: sympy's mpmath, jinja2's MarkupSafe.)
torch_requirements=(torch==2.15.* filelock typing-extensions sympy mpmath networkx jinja2 MarkupSafe fsspec
  nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 nvidia-cufile nvidia-nccl-cu13)

case "$mode" in
  --tests) ;;
  --bench) ;;
  *)
    echo "usage: $0 [--tests|--bench]" >&2
    exit 2
    ;;
esac

if [ ! -x "$venv/bin/python" ]; then
  echo "== peers: creating the virtual environment $venv"
  python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

# A stamp per set of requirements, so that a second run asks pip for nothing.
install_once() {  # install_once NAME [pip install args...]
  local name="$1"
  shift
  local stamp="$venv/.installed-$name"
  local wanted="$*"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then return 0; fi
  echo "== peers: installing $*"
  "${pip[@]}" install "$@"
  echo "$wanted" >"$stamp"
}

install_once tests "${tests_requirements[@]}"

# peer-python: the venv's Python with the CUDA driver stub on the library path (only torch looks for it).
mkdir -p "$venv/cuda-driver-stub"
if [ -f /usr/local/cuda/lib64/stubs/libcuda.so ]; then
  ln -sf /usr/local/cuda/lib64/stubs/libcuda.so "$venv/cuda-driver-stub/libcuda.so.1"
fi
cat >"$venv/bin/peer-python" <<EOF
#!/bin/sh
# Written by scripts/peers_env.sh: Python of the peers' environment, with the CUDA driver stub PyTorch links to.
LD_LIBRARY_PATH="$venv/cuda-driver-stub\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$venv/bin/python" "\$@"
EOF
chmod +x "$venv/bin/peer-python"

if [ "$mode" = "--bench" ]; then
  install_once torch --no-deps "${torch_requirements[@]}"
  # torch.optim imports sympy (through torch.fx), which a bare `import torch` does not.
  if ! "$venv/bin/peer-python" -c "import torch, torch.optim" 2>/dev/null; then
    echo "== peers: torch does not import here (it needs the CUDA toolkit's libraries under /usr/local/cuda):" >&2
    "$venv/bin/peer-python" -c "import torch, torch.optim" 2>&1 | tail -1 >&2
    exit 1
  fi
fi
TF_CPP_MIN_LOG_LEVEL=2 "$venv/bin/peer-python" - <<'EOF'
import importlib
found = []
for name in ("tensorflow", "keras", "tensorboard", "safetensors", "numpy", "onnxruntime", "onnx", "torch"):
    try:
        found.append(f"{name} {importlib.import_module(name).__version__}")
    except ImportError:
        pass
print("== peers:", ", ".join(found))
EOF
