#!/usr/bin/env bash
# Sets strata up on a fresh Debian 12 machine and then does one thing:
#   scripts/setup.sh --main    install, build, run the main job on Fashion-MNIST
#   scripts/setup.sh --test    install (with the peers' venv of scripts/peers_env.sh --tests: TensorFlow, for the
#                              tests labelled peers), build, run every test (then the layers' fast suites again in
#                              the sanitizer build, then each fuzz target for 15 s, then compile the CUDA build and
#                              run its GPU tests, which skip without a GPU)
#   scripts/setup.sh --fuzz [SECONDS]   install (with clang), build, run each fuzz target of fuzz/ for SECONDS
#                              (default 60) on a copy of its seed corpus; fails if any finds something
#   scripts/setup.sh --bench   install, build, set up the peers (scripts/peers_env.sh --bench: TensorFlow and PyTorch 2
#                              in .venv-peers; Debian's PyTorch 1.13 too, for the two benches that keep its column),
#                              run the benchmarks with the peers' Python
#   scripts/setup.sh --build   install and build only
# Installing is idempotent: packages already present are not asked for again.
set -euo pipefail

mode="${1:---build}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${STRATA_BUILD_DIR:-$root/build}"
jobs="$(nproc)"
# ccache (every tree's compiler launcher, CMakeLists.txt) hashes paths under the checkout relative to the build
# directory, so trees at the same depth (build/, build-wheel/ of the Python wheel's test) share their compiles.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libdnnl-dev ocl-icd-opencl-dev libopenblas-dev
  libgloo-dev libopenmpi-dev openmpi-bin
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev
  libonnx-dev  # its onnx/onnx.proto only: ONNX export's messages are generated from it (src/CMakeLists.txt)
  nlohmann-json3-dev libcli11-dev zlib1g-dev libdeflate-dev libisal-dev libyaml-cpp-dev libspdlog-dev libfmt-dev
  libzip-dev libjpeg62-turbo-dev libpng-dev  # .npz archives (libzip); image folders' JPEG and PNG files
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy python3-venv dataset-fashion-mnist
  iproute2
)
# Debian's PyTorch 1.13: models_bench and kernels_bench keep its column (its slow convolution); the other benches
# compare with TensorFlow and PyTorch 2 from the peers' environment.
[ "$mode" = "--bench" ] && packages+=(python3-torch python3-venv)
# libFuzzer: Debian's clang and its runtime (fuzz/ is built with clang, the rest with the default compiler).
if [ "$mode" = "--fuzz" ] || [ "$mode" = "--test" ]; then packages+=(clang libclang-rt-14-dev); fi

install_packages() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "== installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Our own sources build without warnings, and -Werror keeps them so (STRATA_WERROR covers strata's targets only).
# The Python package's module (python/, STRATA_PYTHON) is built for the peers' venv's Python when it exists (it has
# nanobind: scripts/peers_env.sh --tests), so that the python tests import it from the build tree.
peers_python="${STRATA_PEERS_VENV:-$root/.venv-peers}/bin/python"
configure_tree() {  # configure_tree DIR [cmake args...]
  local dir="$1"
  shift
  local python_args=()
  [ -x "$peers_python" ] && python_args=(-DPython_EXECUTABLE="$peers_python")
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_WERROR=ON "${python_args[@]}" "$@" >/dev/null
}
build_tree() {  # build_tree DIR [cmake args...]: every target (tests, benchmarks, examples)
  configure_tree "$@"
  cmake --build "$1" -j "$jobs"
}

# The fuzz targets (fuzz/CMakeLists.txt): only the parsers are compiled, instrumented; the rest is linked from $build.
build_fuzz() {
  cmake -S "$root/fuzz" -B "$build-fuzz" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DSTRATA_BUILD_DIR="$build" >/dev/null
  cmake --build "$build-fuzz" -j "$jobs"
}

# The CUDA build (-DSTRATA_WITH_CUDA=ON with the toolkit under /usr/local/cuda): compiled and linked on every change,
# at -O0 (only that it builds is checked here; scripts/gpu_bundle.sh makes the optimised one that a GPU machine
# runs), with its GPU test binary run once: without a GPU its tests skip, saying so, and the rest pass.
build_cuda() {
  if [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "== CUDA build: skipped (no CUDA toolkit at /usr/local/cuda)"
    return
  fi
  echo "== CUDA build (compiles and links; nothing runs on a GPU here)"
  configure_tree "$build-cuda" -DSTRATA_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=None -DSTRATA_BUILD_EXAMPLES=OFF
  cmake --build "$build-cuda" -j "$jobs" --target strata_cli_main cuda_test gpu_bench gpu_ops_bench
  (cd "$root" && "$build-cuda/tests/cuda_test" --gtest_brief=1)
}

install_packages
# The peers' venv before the build: the Python module is built for its Python (configure_tree).
[ "$mode" = "--test" ] && "$root/scripts/peers_env.sh" --tests
echo "== building in $build"
if [ "$mode" = "--main" ]; then
  # The first result needs the strata binary alone, not every test, benchmark and example.
  configure_tree "$build"
  cmake --build "$build" -j "$jobs" --target strata_cli_main
else
  build_tree "$build"
fi

case "$mode" in
  --build) ;;
  --main)
    # The Keras tutorial CNN, 10 epochs; ends with "test loss ... - test accuracy ...".
    "$build/strata" train "$root/configs/fashion_mnist_cnn.yaml"
    ;;
  --test)
    # (The peers' venv was made before the build: the compatibility tests (label peers) compare with TensorFlow,
    # Keras, TensorBoard and safetensors there, and the python tests run the module built for its Python.)
    # Fast suites in parallel, the ones labelled slow one at a time.
    ctest --test-dir "$build" --output-on-failure -j "$jobs" -LE slow
    ctest --test-dir "$build" --output-on-failure -L slow
    # The layers' fast suites again under AddressSanitizer + UBSan. The tree holds only those (tests/CMakeLists.txt:
    # not the CLI's end-to-end runs, nor the slow, peers and package tests) and builds only them and what they link.
    echo "== sanitizer build"
    # (Warnings are held to -Werror in the main tree; the instrumented one only runs the tests.)
    # (No Python module: an ASan-instrumented one cannot load into an uninstrumented Python.)
    configure_tree "$build-asan" -DSTRATA_SANITIZE=ON -DSTRATA_BUILD_BENCH=OFF -DSTRATA_BUILD_EXAMPLES=OFF \
      -DSTRATA_WERROR=OFF -DSTRATA_PYTHON=OFF
    mapfile -t asan_tests < <(ctest --test-dir "$build-asan" -N | sed -n 's/^ *Test *#[0-9]*: //p')
    cmake --build "$build-asan" -j "$jobs" --target "${asan_tests[@]}"
    ASAN_OPTIONS=detect_leaks=0 ctest --test-dir "$build-asan" --output-on-failure -j "$jobs"
    # Every fuzz target briefly, so that a parser that crashes on its seeds or soon after is caught on every change.
    echo "== fuzz targets, 15 s each"
    build_fuzz
    FUZZ_JOBS="$jobs" "$root/fuzz/run.sh" "$build-fuzz" 15
    build_cuda
    ;;
  --fuzz)
    echo "== fuzz targets, ${2:-60} s each"
    build_fuzz
    FUZZ_JOBS="$jobs" "$root/fuzz/run.sh" "$build-fuzz" "${2:-60}"
    ;;
  --bench)
    # Without the peers (no network, say) the benches still run, each saying which columns it skipped and why.
    "$root/scripts/peers_env.sh" --bench || echo "== peers: not set up; the benches skip the TensorFlow and PyTorch 2 columns"
    python="${STRATA_PEERS_VENV:-$root/.venv-peers}/bin/peer-python"
    [ -x "$python" ] || python=/usr/bin/python3
    for script in "$root"/bench/*_bench.py; do
      STRATA_BUILD_DIR="$build" "$python" "$script"
    done
    ;;
  *)
    echo "usage: $0 [--main|--test|--bench|--build|--fuzz [SECONDS]]" >&2
    exit 2
    ;;
esac
