#!/usr/bin/env bash
# Issue 37's one-call GPU check, run on a GPU machine from the bundle scripts/gpu_bundle.sh made:
#
#   bash gpu-bundle/gpu_check.sh                 # the copy inside the bundle
#   bash scripts/gpu_check.sh gpu-bundle         # from a checkout, given the bundle's folder
#
# It unpacks the bundle (into $GPU_CHECK_WORK, default /tmp/strata-gpu-check), finds the CUDA libraries of that
# machine's pip packages (site-packages/nvidia/*/lib), /usr/local/cuda/lib64 and the driver's libcuda, checks that
# every library the programs need resolves and that nvidia-smi sees a GPU, then runs, each step under its own time
# limit and all of it within 6 minutes:
#   1. cuda_test: every GPU op against the CPU result, float32 and the bf16 of mixed precision (gtest; XML report to
#      $OUT/cuda_test.xml)
#   2. the main job on the GPU: strata train fashion_mnist_cnn.yaml --device gpu --epochs 10 on the bundled
#      Fashion-MNIST; passes at test accuracy >= 0.91
#   2b. the strategies of several replicas on the GPU(s), one epoch each of the same job: --strategy mirrored (every
#      visible GPU, NCCL all-reduce) and --strategy multi_worker_mirrored (a single worker on nccl)
#   2c. mixed precision on the GPU: one epoch of the same job with --mixed-precision bf16, the CPU's oneDNN held to
#      AVX2 (no bf16 there): it must say its products compute in bf16 on the GPU, warn nothing about the CPU and learn
#   3. bench/gpu_bench.py: strata's step times beside that machine's PyTorch, fp32 and bf16 on both sides, as one table
#   4. gpu_ops_bench: each GPU kernel's time on those models' shapes (where a slow step comes from)
# GPU_CHECK_STEPS (a comma list of tests, job, strategies, bf16, bench, ops) runs only those steps.
# With $OUT set, the whole output also goes to $OUT/gpu_check.log (and the bench's figures to $OUT/gpu_bench.json).
# It ends with PASS, FAIL or SKIP per step and exits 1 if any step failed. Without a GPU (the dry run) the GPU steps
# are skipped, saying so (cuda_test still runs: its GPU tests skip themselves; gpu_bench trains one CPU step), and it
# exits 0 once the bundle unpacked, its programs' libraries resolved and those two ran.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ $# -ge 1 ]]; then
  BUNDLE=$(cd "$1" && pwd)
elif [[ -f $HERE/strata.tar.xz ]]; then
  BUNDLE=$HERE
else
  BUNDLE=$(cd "$HERE/.." && pwd)/gpu-bundle
fi
WORK=${GPU_CHECK_WORK:-/tmp/strata-gpu-check}
# Which steps run after the libraries (a comma list of tests, job, strategies, bf16, bench, ops; default all): a
# second call on the same lease can rerun only what a fix touched.
STEPS=",${GPU_CHECK_STEPS:-tests,job,strategies,bf16,bench,ops},"
wanted() { [[ $STEPS == *",$1,"* ]]; }
START=$SECONDS
TOTAL_LIMIT=360  # seconds: the issue's 6 minutes for the whole check

if [[ -n ${OUT:-} ]]; then
  mkdir -p "$OUT"
  LOG=$OUT/gpu_check.log
  exec > >(tee -a "$LOG") 2>&1
  TEE_PID=$!
  # At the end, let tee write the last lines (the summary) before the script is done.
  trap 'exec >&- 2>&-; wait "$TEE_PID" 2>/dev/null || true' EXIT
fi

declare -a STEP_NAMES=() STEP_RESULTS=()
record() { STEP_NAMES+=("$1"); STEP_RESULTS+=("$2"); echo "-- $1: $2"; }
section() { printf '\n== %s (%ds into the check)\n' "$1" "$((SECONDS - START))"; }
summary() {
  section "summary"
  local failed=0 i
  for i in "${!STEP_NAMES[@]}"; do
    printf '  %-14s %s\n' "${STEP_NAMES[$i]}" "${STEP_RESULTS[$i]}"
    [[ ${STEP_RESULTS[$i]} == FAIL* ]] && failed=1
  done
  echo "total: $((SECONDS - START)) s (limit ${TOTAL_LIMIT} s)"
  if ((failed)); then echo "gpu_check: FAIL"; else echo "gpu_check: PASS"; fi
  return "$failed"
}
# Seconds a step may take: its own limit, or what is left of the 6 minutes if less.
budget() { local left=$((TOTAL_LIMIT - (SECONDS - START) - 5)); ((left < $1)) && echo $((left > 1 ? left : 1)) || echo "$1"; }
# Whether the GPU step KEY (a word of GPU_CHECK_STEPS) runs; if not, records why under NAME: not asked for, no GPU, or
# libraries missing.
gpu_step() {
  if ! wanted "$1"; then record "$2" "SKIP (not in GPU_CHECK_STEPS)"; return 1; fi
  if ((!GPU)); then record "$2" "SKIP (no GPU)"; return 1; fi
  if ((!LIBS_OK)); then record "$2" "FAIL (libraries missing)"; return 1; fi
  return 0
}
# $WORK/fashion_mnist_cnn.yaml: the job as configs/ has it, reading the bundled Fashion-MNIST.
write_job() {
  sed "s|^\(  directory:\).*|\1 $WORK/fashion-mnist|" "$WORK/configs/fashion_mnist_cnn.yaml" > "$WORK/fashion_mnist_cnn.yaml"
  grep -q "directory: $WORK/fashion-mnist" "$WORK/fashion_mnist_cnn.yaml" ||
    { echo "could not point the job at the data"; exit 1; }
}
# Trains that job on the GPU within LIMIT seconds with the further flags given, its output shown and kept in LOG; sets
# rc (124 or 137: over the limit) and accuracy (its last "test accuracy", or empty).
train_on_gpu() {
  local limit=$1 log=$2
  shift 2
  set +e
  (cd "$WORK" && run_bin timeout -k 5 "$limit" "$WORK/bin/strata" train "$WORK/fashion_mnist_cnn.yaml" --device gpu \
    "$@") 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  accuracy=$(grep -oE 'test accuracy [0-9.]+' "$log" | tail -1 | awk '{print $3}' || true)
}

section "bundle $BUNDLE"
[[ -f $BUNDLE/strata.tar.xz && -f $BUNDLE/fashion-mnist.tar.xz ]] ||
  { echo "gpu_check: $BUNDLE holds no strata.tar.xz and fashion-mnist.tar.xz: make it with scripts/gpu_bundle.sh"; exit 1; }
rm -rf "$WORK"
mkdir -p "$WORK"
xz -dc "$BUNDLE/strata.tar.xz" | tar -C "$WORK" -xf -
xz -dc "$BUNDLE/fashion-mnist.tar.xz" | tar -C "$WORK" -xf -
cat "$WORK/BUILD_INFO"
echo "unpacked into $WORK in $((SECONDS - START)) s"

# ---- the machine: GPU, Python with PyTorch, CUDA libraries
section "machine"
uname -srm
# shellcheck disable=SC1091
. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"
GPU=0
gpus=$(nvidia-smi -L 2>/dev/null || true)  # captured first: `| grep -q` could end nvidia-smi early (pipefail)
if grep -q '^GPU ' <<<"$gpus"; then
  GPU=1
  echo "$gpus"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv || true
else
  echo "no GPU: nvidia-smi is missing or lists no GPU"
fi
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import torch' 2>/dev/null && [[ -x /opt/torch/.venv/bin/python3 ]]; then
  PYTHON=/opt/torch/.venv/bin/python3
fi
command -v "$PYTHON" >/dev/null 2>&1 && echo "python: $(command -v "$PYTHON") $("$PYTHON" -c 'import sys; print(sys.version.split()[0])')"

# The CUDA libraries: each pip package's nvidia/<name>/lib (cu13: runtime and cuBLAS; cudnn; nccl), then the toolkit's,
# then the directory of the driver's libcuda.so.1 when the loader would not find it by itself.
CUDA_DIRS=()
if command -v "$PYTHON" >/dev/null 2>&1; then
  while IFS= read -r d; do
    [[ -n $d ]] && CUDA_DIRS+=("$d")
  done < <("$PYTHON" - <<'EOF' 2>/dev/null || true
import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
for sp in dirs:
    for lib in sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib"))):
        if glob.glob(os.path.join(lib, "*.so*")):
            print(lib)
EOF
)
fi
[[ -d /usr/local/cuda/lib64 ]] && CUDA_DIRS+=(/usr/local/cuda/lib64)
cache=$(ldconfig -p 2>/dev/null || true)
if ! grep -q 'libcuda\.so\.1 ' <<<"$cache"; then
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/wsl/lib; do
    if [[ -e $d/libcuda.so.1 ]]; then CUDA_DIRS+=("$d"); break; fi
  done
fi
LIBPATH=$WORK/lib
for d in "${CUDA_DIRS[@]}"; do LIBPATH+=":$d"; done
[[ -n ${LD_LIBRARY_PATH:-} ]] && LIBPATH+=":$LD_LIBRARY_PATH"
echo "CUDA library folders: ${CUDA_DIRS[*]:-(none found)}"
echo "LD_LIBRARY_PATH for strata's programs: $LIBPATH"

# strata's programs get the bundle's libraries; Python keeps its own (the bundle's older C++ libraries must not
# shadow the ones PyTorch needs), so gpu_bench.py starts gpu_bench through this wrapper.
run_bin() { LD_LIBRARY_PATH=$LIBPATH "$@"; }
cat > "$WORK/bin/gpu_bench.sh" <<EOF
#!/bin/sh
LD_LIBRARY_PATH='$LIBPATH' exec '$WORK/bin/gpu_bench' "\$@"
EOF
chmod +x "$WORK/bin/gpu_bench.sh"

# ---- 0. every library resolves (else nothing below can start)
section "0. libraries"
LIBS_OK=1
for b in strata cuda_test gpu_bench gpu_ops_bench; do
  resolved=$(run_bin ldd "$WORK/bin/$b" 2>&1) || true
  if grep -q 'not found' <<<"$resolved"; then
    LIBS_OK=0
    echo "$b: missing libraries:"
    grep 'not found' <<<"$resolved" | sed 's/^/  /'
  fi
done
echo "where the CUDA and system libraries come from:"
run_bin ldd "$WORK/bin/strata" "$WORK/bin/cuda_test" "$WORK/bin/gpu_bench" 2>/dev/null |
  grep -E 'lib(cuda|cudart|cublas|cublasLt|cudnn|nccl|stdc\+\+|gomp|ssl|crypto|z)\.so' | awk '{print "  " $1, $2, $3}' | sort -u || true
if ((LIBS_OK)) && run_bin "$WORK/bin/strata" --help >/dev/null; then
  record "libraries" "PASS"
else
  record "libraries" "FAIL (see above)"
fi
if ((LIBS_OK)); then
  echo "strata info (devices, memory, library versions), if this build has it:"
  run_bin timeout 30 "$WORK/bin/strata" info 2>&1 | sed 's/^/  /' || echo "  (strata info failed or is missing)"
fi

# ---- 1. cuda_test
section "1. cuda_test: every GPU op against the CPU"
if ! wanted tests; then
  record "cuda_test" "SKIP (not in GPU_CHECK_STEPS)"
elif ((!LIBS_OK)); then
  record "cuda_test" "FAIL (libraries missing)"
else
  xml=${OUT:-$WORK}/cuda_test.xml
  limit=$(budget 80)
  rc=0
  (cd "$WORK" && run_bin timeout -k 5 "$limit" "$WORK/bin/cuda_test" --gtest_output="xml:$xml" --gtest_color=no) || rc=$?
  if ((rc == 0 && !GPU)); then
    record "cuda_test" "SKIP (no GPU: it ran, its GPU tests skipped themselves)"
  elif ((rc == 0)) && grep -q 'no CUDA device visible' "$xml" 2>/dev/null; then
    # nvidia-smi sees the GPU but strata's CUDA runtime does not (driver or library mismatch): nothing was checked.
    record "cuda_test" "FAIL (nvidia-smi lists a GPU, but cuda_test saw none and skipped its GPU tests)"
  elif ((rc == 0)); then
    record "cuda_test" "PASS ($(grep -c '<testcase' "$xml" 2>/dev/null || true) tests, $(grep -c '<skipped' "$xml" 2>/dev/null || true) of them skipped)"
  elif ((rc == 124 || rc == 137)); then
    record "cuda_test" "FAIL (over its ${limit} s limit)"
  else
    record "cuda_test" "FAIL (exit $rc)"
  fi
fi

# ---- 2. the main job
section "2. main job: strata train fashion_mnist_cnn.yaml --device gpu --epochs 10"
if gpu_step job "main job"; then
  write_job
  limit=$(budget 150)
  train_on_gpu "$limit" "$WORK/train.log" --epochs 10 --verbose 2
  if ((rc == 124 || rc == 137)); then
    record "main job" "FAIL (over its ${limit} s limit)"
  elif ((rc != 0)); then
    record "main job" "FAIL (exit $rc)"
  elif [[ -z $accuracy ]]; then
    record "main job" "FAIL (no \"test accuracy\" line)"
  elif awk -v a="$accuracy" 'BEGIN {exit !(a >= 0.91)}'; then
    record "main job" "PASS (test accuracy $accuracy >= 0.91)"
  else
    record "main job" "FAIL (test accuracy $accuracy < 0.91)"
  fi
fi

# ---- 2b. mirrored and multi-worker mirrored on the GPU(s): one epoch each, over NCCL
section "2b. strategies: strata train fashion_mnist_cnn.yaml --device gpu --strategy mirrored | multi_worker_mirrored"
if gpu_step strategies "strategies"; then
  write_job  # (again, for when step 2 was not wanted)
  result=""
  for strategy in mirrored multi_worker_mirrored; do
    limit=$(budget 30)
    log=$WORK/train_$strategy.log
    train_on_gpu "$limit" "$log" --strategy "$strategy" --epochs 1 --verbose 2
    if ((rc == 124 || rc == 137)); then
      result="$result FAIL($strategy: over its ${limit} s limit)"
    elif ((rc != 0)); then
      result="$result FAIL($strategy: exit $rc)"
    elif ! grep -q 'nccl' "$log"; then
      result="$result FAIL($strategy: its strategy line names no nccl)"
    elif [[ -n $accuracy ]] && awk -v a="$accuracy" 'BEGIN {exit !(a >= 0.80)}'; then
      result="$result ok($strategy: test accuracy $accuracy after 1 epoch)"
    else
      result="$result FAIL($strategy: test accuracy '${accuracy}' < 0.80 after 1 epoch)"
    fi
  done
  if [[ $result == *FAIL* ]]; then record "strategies" "FAIL:$result"; else record "strategies" "PASS:$result"; fi
fi

# ---- 2c. mixed precision on the GPU: one epoch under --mixed-precision bf16
section "2c. mixed precision: strata train fashion_mnist_cnn.yaml --device gpu --mixed-precision bf16 --epochs 1"
if gpu_step bf16 "mixed bf16"; then
  write_job
  limit=$(budget 30)
  log=$WORK/train_bf16.log
  # oneDNN held to AVX2: a CPU without bf16 must not matter to (or be warned about by) a model on the GPU.
  ONEDNN_MAX_CPU_ISA=AVX2 train_on_gpu "$limit" "$log" --mixed-precision bf16 --epochs 1 --verbose 2
  if ((rc == 124 || rc == 137)); then
    record "mixed bf16" "FAIL (over its ${limit} s limit)"
  elif ((rc != 0)); then
    record "mixed bf16" "FAIL (exit $rc)"
  elif ! grep -q 'compute in bf16 on the GPU' "$log"; then
    record "mixed bf16" "FAIL (no line saying the products compute in bf16 on the GPU)"
  elif grep -q 'strata: warning: mixed precision' "$log"; then
    record "mixed bf16" "FAIL (it warned about the CPU's bf16 instructions)"
  elif [[ -n $accuracy ]] && awk -v a="$accuracy" 'BEGIN {exit !(a >= 0.80)}'; then
    record "mixed bf16" "PASS (test accuracy $accuracy after 1 epoch in bf16)"
  else
    record "mixed bf16" "FAIL (test accuracy '${accuracy}' < 0.80 after 1 epoch in bf16)"
  fi
fi

# ---- 3. the bench beside PyTorch
section "3. gpu_bench.py: strata beside PyTorch"
if ! wanted bench; then
  record "bench" "SKIP (not in GPU_CHECK_STEPS)"
elif ((!GPU)); then
  # Without a GPU: one CPU step of the smallest model shows the bundled gpu_bench starts and trains.
  if ((LIBS_OK)) && run_bin timeout 60 "$WORK/bin/gpu_bench" --device cpu --steps 1 --warmup 0 --models cnn64; then
    record "bench" "SKIP (no GPU; gpu_bench trained one step on the CPU)"
  else
    record "bench" "FAIL (no GPU, and gpu_bench failed on the CPU)"
  fi
elif ! command -v "$PYTHON" >/dev/null 2>&1; then
  record "bench" "FAIL (no $PYTHON)"
else
  limit=$(budget 110)
  rc=0
  json_args=()
  [[ -n ${OUT:-} ]] && json_args=(--json-out "$OUT/gpu_bench.json")
  PYTHONUNBUFFERED=1 timeout -k 5 "$limit" "$PYTHON" "$WORK/bench/gpu_bench.py" --binary "$WORK/bin/gpu_bench.sh" \
    --require-gpu --timeout $((limit * 2 / 3)) "${json_args[@]}" || rc=$?
  if ((rc == 0)); then
    record "bench" "PASS (table above)"
  elif ((rc == 124 || rc == 137)); then
    record "bench" "FAIL (over its ${limit} s limit)"
  else
    record "bench" "FAIL (exit $rc; the table above shows what ran)"
  fi
fi

# ---- 4. each GPU kernel's time on the models' shapes: where a slow step of the table above comes from
section "4. gpu_ops_bench: op by op"
if gpu_step ops "ops"; then
  rc=0
  run_bin timeout -k 5 "$(budget 40)" "$WORK/bin/gpu_ops_bench" || rc=$?
  if ((rc == 0)); then record "ops" "PASS (times above)"; else record "ops" "FAIL (exit $rc)"; fi
fi

summary
