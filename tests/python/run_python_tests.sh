#!/usr/bin/env bash
# ctest's python_test: the Python package's tests (tests/python, pytest) against the module of this build tree, in the
# Python that built it (the peers' virtual environment under scripts/setup.sh: scripts/peers_env.sh --tests installs
# nanobind, numpy and pytest there).
#   tests/python/run_python_tests.sh PYTHON MODULE_PARENT_DIR [pytest arguments...]
set -euo pipefail

python="$1"
module_parent="$2"
shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if ! "$python" -c "import pytest, numpy" 2>/dev/null; then
  echo "python_test: $python lacks pytest or numpy: run scripts/peers_env.sh --tests (or pip install pytest numpy)" >&2
  exit 1
fi
# -p no:cacheprovider and no bytecode: nothing written to the tree.
export PYTHONPATH="$module_parent${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
exec "$python" -m pytest -p no:cacheprovider -q "$root/tests/python" "$@"
