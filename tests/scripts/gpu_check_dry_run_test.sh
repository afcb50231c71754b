#!/usr/bin/env bash
# The GPU check's dry run from this build, as on a machine without a GPU: scripts/gpu_bundle.sh packs this build's
# strata, cuda_test and gpu_bench (quickly: xz -1, with ten random Fashion-MNIST-shaped images for data), then the
# bundle's gpu_check.sh must unpack it, resolve every library, run cuda_test (its GPU tests skip themselves) and one
# CPU step of gpu_bench, skip the GPU steps saying so, write its log under $OUT and exit 0.
# Usage: gpu_check_dry_run_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/data" "$scratch/out"
python3 -c "import sys; sys.path.insert(0, '$source/bench'); import bench_common as b
b.write_idx('$scratch/data', 'train', 10, 1); b.write_idx('$scratch/data', 't10k', 10, 2)"
"$source/scripts/gpu_bundle.sh" --build-dir "$build" --out "$scratch/bundle" --data "$scratch/data" --no-build \
  --allow-cpu-build --fast --cache-dir "$scratch/cache" --max-mib 64 > "$scratch/bundle.log" 2>&1 || { cat "$scratch/bundle.log"; exit 1; }
rc=0
OUT=$scratch/out GPU_CHECK_WORK=$scratch/work bash "$scratch/bundle/gpu_check.sh" > "$scratch/check.txt" 2>&1 || rc=$?
cat "$scratch/check.txt"
fail() { echo "gpu_check_dry_run_test: $*" >&2; exit 1; }
((rc == 0)) || fail "gpu_check.sh exited $rc"
grep -q '^gpu_check: PASS' "$scratch/check.txt" || fail "no 'gpu_check: PASS' line"
grep -qE '^  libraries +PASS' "$scratch/check.txt" || fail "the libraries did not resolve"
for step in cuda_test "main job" strategies "mixed bf16" bench; do
  grep -qE "^  $step +SKIP \(no GPU" "$scratch/check.txt" || fail "step '$step' was not skipped for want of a GPU"
done
grep -q '^gpu_check: PASS' "$scratch/out/gpu_check.log" || fail "no log in \$OUT"
echo "gpu_check_dry_run_test: passed"
