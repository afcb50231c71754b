#!/usr/bin/env bash
# ctest's python_wheel_slow_test (labels python, slow): `pip wheel .` from the checkout (scikit-build-core configures
# build-wheel/, whose compiles ccache shares with the main build), then the wheel installed into a fresh virtual
# environment trains, evaluates and predicts from outside the checkout.
#   tests/python/wheel_slow_test.sh PYTHON [CXX]   (a Python with pip, scikit-build-core and nanobind: the peers'
#                                                   venv; the main tree's C++ compiler, by the path it names it)
set -euo pipefail

python="$1"
cxx="${2:-c++}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The wheel's tree is build-wheel/, beside build/ and at the same depth, and configured with the main tree's compiler
# (ccache tells c++ from g++, the same program) and -Werror: with ccache's base directory at the checkout
# (scripts/setup.sh exports it), each compile of the strata libraries is then the main tree's command, and the wheel
# links what the main build compiled instead of compiling it a second time (measured: 43 s for the whole test, against
# 346 s). The build requirements (scikit-build-core, nanobind) are those of $python's environment, as pyproject.toml
# lists them (--no-build-isolation): an isolated environment would put nanobind in a new temporary path on every run,
# and ccache would find none of the module's compiles.
start=$(date +%s)
CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
  "$python" -m pip wheel --disable-pip-version-check -q --no-deps --no-build-isolation -w "$work/wheels" \
  -C build-dir="$root/build-wheel" -C cmake.define.CMAKE_CXX_COMPILER="$cxx" -C cmake.define.STRATA_WERROR=ON \
  "$root"
echo "pip wheel .: $(($(date +%s) - start)) s"
wheel=("$work"/wheels/strata-*.whl)
"$python" -m venv "$work/fresh"
"$work/fresh/bin/python" -m pip install --disable-pip-version-check -q "${wheel[0]}"
cd "$work"
"$work/fresh/bin/python" - <<'PY'
import numpy as np
import strata

assert "site-packages" in strata.__file__, strata.__file__
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.int64)
with strata.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
    model = strata.Sequential([strata.layers.Dense(16, activation="relu"), strata.layers.Dense(2)])
    model.compile(optimizer=strata.optimizers.Adam(learning_rate=0.01),
                  loss=strata.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
history = model.fit(x, y, epochs=10, batch_size=32, verbose=0)
loss, accuracy = model.evaluate(x, y, verbose=0)
assert accuracy > 0.8, accuracy
assert model.predict(x).shape == (512, 2)
print(f"the installed wheel trains: accuracy {accuracy:.3f} from {strata.__file__}")
PY
