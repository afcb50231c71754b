#!/usr/bin/env bash
# Packs a CUDA build of strata into one folder (default gpu-bundle/ at the repo root, at most 40 MiB) that the
# `device` tool carries to a GPU machine, where the folder's gpu_check.sh runs the one-call check of issue 37.
#
#   scripts/gpu_bundle.sh [--build-dir DIR] [--out DIR] [--max-mib N] [--data DIR] [--jobs N]
#                         [--no-build] [--allow-cpu-build] [--fast] [--cache-dir DIR]
#
# --no-build packs what DIR holds without running ninja; --allow-cpu-build accepts a build without CUDA and --fast
# packs with xz -1 (both for tests/scripts/gpu_check_dry_run_test.sh, which dry-runs the check from a CPU build).
# The packed data set is kept in --cache-dir (default DIR/gpu-bundle-cache) and packed again only when it changes.
#
# It configures DIR (default build-gpu-bundle) if it is not configured yet, with -DSTRATA_WITH_CUDA=ON, Release,
# -DBUILD_SHARED_LIBS=ON (the four programs then load one copy of strata's layers, libstrata_*.so, instead of each
# linking its own) and -DCMAKE_CUDA_ARCHITECTURES=90-real: machine code for the lent H200 (sm_90) only, without the
# PTX that newer GPUs would compile (the library build's default keeps it; here it would cost part of the room under
# 40 MiB). It builds the four programs the check runs (strata, cuda_test, gpu_bench, gpu_ops_bench), and writes:
#   gpu_check.sh           the check (scripts/gpu_check.sh), run there as `bash gpu-bundle/gpu_check.sh`
#   strata.tar.xz          bin/{strata,cuda_test,gpu_bench,gpu_ops_bench} (stripped), lib/ (the shared libraries they
#                          need, strata's own stripped, but glibc's, the CUDA libraries and the C++/zlib/OpenSSL
#                          runtime every Ubuntu 24.04 with Python has: see SYSTEM_LIBS), bench/gpu_bench.py,
#                          bench/bench_common.py, configs/fashion_mnist_cnn.yaml and BUILD_INFO
#   fashion-mnist.tar.xz   the four Fashion-MNIST IDX files, uncompressed inside (xz packs them 15% smaller than
#                          their .gz files; strata reads either)
#   MANIFEST               what is inside, and the sizes
# The CUDA libraries (cudart, cuBLAS, cuDNN, NCCL) come from the GPU machine's pip packages (nvidia-*), the driver's
# libcuda from its system: the device tool carries at most 64 MiB, and those libraries alone are far more.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$REPO/build-gpu-bundle
OUTDIR=$REPO/gpu-bundle
MAX_MIB=40
DATA=/usr/share/datasets/fashion-mnist
JOBS=2
BUILD_IT=1
NEED_CUDA=1
XZ_LEVEL=9e
CACHE=
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) BUILD=$(realpath -m "$2"); shift 2 ;;
    --out) OUTDIR=$(realpath -m "$2"); shift 2 ;;
    --max-mib) MAX_MIB=$2; shift 2 ;;
    --data) DATA=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --no-build) BUILD_IT=0; shift ;;
    --allow-cpu-build) NEED_CUDA=0; shift ;;
    --fast) XZ_LEVEL=1; shift ;;
    --cache-dir) CACHE=$(realpath -m "$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_bundle.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "gpu_bundle.sh: $*" >&2; exit 1; }

# Libraries not carried. glibc's own (the GPU machine's glibc 2.39 is newer and must be the one loaded); the CUDA
# libraries (from that machine's pip packages and driver); and SYSTEM_LIBS, which every Ubuntu 24.04 with Python
# and a C++ compiler has (apt needs libstdc++, Python's ssl module libssl/libcrypto, gcc libgomp), all newer there
# and backward compatible. Carrying these would put the bundle over 40 MiB; gpu_check.sh checks with ldd that each
# one resolves there before running anything.
GLIBC_LIBS='ld-linux-x86-64|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libnsl|libanl|libBrokenLocale'
CUDA_LIBS='libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvrtc[a-z-]*|libnvJitLink|libcufft|libcurand|libcusparse|libcusolver|libnvToolsExt'
SYSTEM_LIBS='libstdc\+\+|libgcc_s|libgomp|libz|libssl|libcrypto'
EXCLUDE="^(${GLIBC_LIBS}|${CUDA_LIBS}|${SYSTEM_LIBS})\.so"

# ---- 1. the CUDA build
if [[ ! -f $BUILD/build.ninja ]]; then
  echo "== configuring $BUILD (-DSTRATA_WITH_CUDA=ON, Release, -DBUILD_SHARED_LIBS=ON, sm_90 machine code only)"
  cmake -S "$REPO" -B "$BUILD" -G Ninja -DSTRATA_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DSTRATA_BUILD_EXAMPLES=OFF -DSTRATA_PYTHON=OFF
fi
if ((NEED_CUDA)) && ! grep -q '^STRATA_WITH_CUDA:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  die "$BUILD is configured without -DSTRATA_WITH_CUDA=ON; give another --build-dir"
fi
if ((BUILD_IT)); then
  echo "== building strata, cuda_test, gpu_bench and gpu_ops_bench in $BUILD (-j$JOBS)"
  ninja -C "$BUILD" -j"$JOBS" strata_cli_main cuda_test gpu_bench gpu_ops_bench
fi
# setup.sh --test compiles its CUDA tree without optimisation (build type None) only to prove it builds; a bundle of
# it runs, but its host code is -O0, so gpu_bench's step times beside PyTorch's would not be strata's.
BUILD_TYPE=$(grep '^CMAKE_BUILD_TYPE:' "$BUILD/CMakeCache.txt" | cut -d= -f2)
case $BUILD_TYPE in
  Release|RelWithDebInfo|MinSizeRel) ;;
  *) echo "gpu_bundle.sh: warning: $BUILD is built without optimisation (CMAKE_BUILD_TYPE='$BUILD_TYPE'): its" \
          "timings are not strata's; for the bench, configure another dir with -DSTRATA_WITH_CUDA=ON" \
          "-DCMAKE_BUILD_TYPE=Release and pass --build-dir" >&2 ;;
esac
if ! grep -q '^BUILD_SHARED_LIBS:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  echo "gpu_bundle.sh: warning: $BUILD links strata's layers statically, so each of the four programs carries its" \
       "own copy and the bundle may pass ${MAX_MIB} MiB; configure it with -DBUILD_SHARED_LIBS=ON" >&2
fi
BINARIES=("$BUILD/strata" "$BUILD/tests/cuda_test" "$BUILD/bench/gpu_bench" "$BUILD/bench/gpu_ops_bench")
for b in "${BINARIES[@]}"; do [[ -x $b ]] || die "$b was not built"; done

# ---- 2. the programs, their libraries and the files the check reads
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/bench" "$STAGE/configs"
for b in "${BINARIES[@]}"; do
  cp "$b" "$STAGE/bin/"
  strip --strip-unneeded "$STAGE/bin/$(basename "$b")"
done
missing=$(ldd "${BINARIES[@]}" | grep 'not found' || true)
[[ -z $missing ]] || die "libraries not found here: $missing"
# `ldd` lines "libfoo.so.1 => /path/libfoo.so.1 (0x...)": carry each by the name the binaries ask for.
ldd "${BINARIES[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
  if [[ $name =~ $EXCLUDE ]]; then continue; fi
  cp -L "$path" "$STAGE/lib/$name"
  if [[ $name == libstrata_* ]]; then strip --strip-unneeded "$STAGE/lib/$name"; fi
done
cp "$REPO/bench/gpu_bench.py" "$REPO/bench/bench_common.py" "$STAGE/bench/"
cp "$REPO/configs/fashion_mnist_cnn.yaml" "$STAGE/configs/"
{
  echo "commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$REPO" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  cuda=$(grep -ho 'CMAKE_CUDA_COMPILER_VERSION "[^"]*"' "$BUILD"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | head -1 || true)
  # shellcheck disable=SC1091
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), nvcc ${cuda#* }"
  echo "build dir: $BUILD ($(grep '^CMAKE_BUILD_TYPE:' "$BUILD/CMakeCache.txt" | cut -d= -f2)," \
       "CUDA architectures $(grep '^CMAKE_CUDA_ARCHITECTURES:' "$BUILD/CMakeCache.txt" | cut -d= -f2)," \
       "shared layers $(grep '^BUILD_SHARED_LIBS:' "$BUILD/CMakeCache.txt" | cut -d= -f2))"
  echo "not carried (the GPU machine's own): glibc, CUDA libraries, ${SYSTEM_LIBS//\\/}"
} > "$STAGE/BUILD_INFO"

rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"
echo "== packing strata.tar.xz (xz -$XZ_LEVEL with the x86 filter)"
tar -C "$STAGE" -cf - BUILD_INFO bin lib bench configs | xz -T1 --x86 --lzma2=preset="$XZ_LEVEL" > "$OUTDIR/strata.tar.xz"

# ---- 3. Fashion-MNIST, packed once and kept beside the build (it does not change)
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [[ -f $DATA/$f.gz || -f $DATA/$f ]] || die "Fashion-MNIST file $f(.gz) not in $DATA (give --data DIR)"
done
CACHE=${CACHE:-$BUILD/gpu-bundle-cache}
key="xz -$XZ_LEVEL $(cd "$DATA" && stat -c '%n %s %Y' ./*-ubyte* | sort)"
if [[ ! -f $CACHE/fashion-mnist.tar.xz || "$(cat "$CACHE/fashion-mnist.key" 2>/dev/null)" != "$key" ]]; then
  echo "== packing Fashion-MNIST from $DATA (xz -$XZ_LEVEL; about a minute at -9e, once per build dir)"
  mkdir -p "$CACHE" "$STAGE/fashion-mnist"
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    if [[ -f $DATA/$f.gz ]]; then gzip -dc "$DATA/$f.gz" > "$STAGE/fashion-mnist/$f"; else cp "$DATA/$f" "$STAGE/fashion-mnist/"; fi
  done
  tar -C "$STAGE" -cf - fashion-mnist | xz -T1 -"$XZ_LEVEL" > "$CACHE/fashion-mnist.tar.xz.tmp"
  mv "$CACHE/fashion-mnist.tar.xz.tmp" "$CACHE/fashion-mnist.tar.xz"
  echo "$key" > "$CACHE/fashion-mnist.key"
fi
cp "$CACHE/fashion-mnist.tar.xz" "$OUTDIR/"

# ---- 4. the check itself, and what is inside
cp "$REPO/scripts/gpu_check.sh" "$OUTDIR/gpu_check.sh"
chmod +x "$OUTDIR/gpu_check.sh"
{
  cat "$STAGE/BUILD_INFO"
  echo
  echo "strata.tar.xz:"
  (cd "$STAGE" && find BUILD_INFO bin lib bench configs -type f -printf '  %-60p %10s bytes\n' | sort)
  echo "fashion-mnist.tar.xz:"
  xz -dc "$OUTDIR/fashion-mnist.tar.xz" | tar -tvf - | awk '{printf "  %-60s %10s bytes\n", $6, $3}'
} > "$OUTDIR/MANIFEST"

bytes=$(du -sb "$OUTDIR" | cut -f1)
limit=$((MAX_MIB * 1024 * 1024))
echo "== $OUTDIR:"
find "$OUTDIR" -maxdepth 1 -type f -printf '%f %s\n' | sort | awk '{printf "  %-22s %6.2f MiB\n", $1, $2 / 1048576}'
printf 'bundle: %.1f MiB (%d bytes); limit %d MiB\n' "$(echo "$bytes / 1048576" | bc -l)" "$bytes" "$MAX_MIB"
if (( bytes > limit )); then
  die "the bundle is $bytes bytes, over the $MAX_MIB MiB limit (the device tool carries 64 MiB with the repo): see MANIFEST for what is largest"
fi
echo "run it there: device tool run with carry [\"$(realpath --relative-to="$REPO" "$OUTDIR")\"] and command: bash $(realpath --relative-to="$REPO" "$OUTDIR")/gpu_check.sh"
