#!/usr/bin/env bash
# Runs every fuzz target of a fuzz build for SECONDS each, FUZZ_JOBS at a time (default 1; one a core, since each
# fuzzer is one process on one core), each on a scratch copy of its committed seed corpus (fuzz/corpus/<target>), so
# the seeds are never polluted:
#   [FUZZ_JOBS=N] fuzz/run.sh BUILD_FUZZ_DIR SECONDS [TARGET...]
# A crash, a leak, undefined behaviour, an input slower than 1 s or one that needs more than 2 GB is a finding: the
# input is kept as BUILD_FUZZ_DIR/findings/<target>/crash-* (or timeout-*, oom-*, leak-*) and the script fails after
# running the rest. Prints one line per target: seconds, executions, and the result.
set -uo pipefail

build="$1"
seconds="${2:-60}"
shift 2 || shift $#
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$root"/fuzz/*_fuzzer.cc; do
    n="$(basename "$f" .cc)"
    targets+=("${n%_fuzzer}")
  done
fi

jobs="${FUZZ_JOBS:-1}"

# run_target T: fuzzes T, writes its line to $build/findings/T.result and exits 1 on a finding.
run_target() {
  local t="$1"
  local bin="$build/${t}_fuzzer"
  local corpus="$build/corpus/$t"
  local findings="$build/findings/$t"
  local result="$build/findings/$t.result"
  [ -x "$bin" ] || { echo "fuzz: $bin is not built" >"$result"; return 1; }
  rm -rf "$corpus"
  mkdir -p "$corpus" "$findings"
  cp "$root/fuzz/corpus/$t"/* "$corpus"/
  local log="$build/findings/$t.log"
  local start
  start=$(date +%s)
  # detect_leaks stays on; UBSan reports are fatal (-fno-sanitize-recover at build time).
  ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1" UBSAN_OPTIONS="print_stacktrace=1" \
    LSAN_OPTIONS="suppressions=$root/fuzz/lsan.supp:print_suppressions=0" \
    "$bin" "$corpus" -max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$findings/" >"$log" 2>&1
  local rc=$?
  local took=$(($(date +%s) - start))
  local execs
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  if [ $rc -eq 0 ]; then
    echo "fuzz: $t: ${took} s, ${execs:-?} executions, no finding" >"$result"
    return 0
  fi
  {
    echo "fuzz: $t: FINDING after ${took} s (${execs:-?} executions), exit $rc; see $log and $findings/"
    grep -m 3 -E '==[0-9]+== ?ERROR|SUMMARY|runtime error|uncaught|deadly' "$log" | sed 's/^/  /'
  } >"$result"
  return 1
}

mkdir -p "$build/findings"
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
wait
# Each target's line, in target order; a finding is a line that does not end "no finding".
failed=()
for t in "${targets[@]}"; do
  cat "$build/findings/$t.result"
  grep -q "no finding$" "$build/findings/$t.result" || failed+=("$t")
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi
