#!/usr/bin/env bash
# Renders `strata report` in headless Chromium and takes a screenshot: the Fashion-MNIST CNN trained for a few
# epochs on one device and on 2 workers (multi_worker_mirrored under `strata launch`), each with TensorBoard files
# and a trace, then `strata report --compare` of both, opened by Debian's chromium (installed if missing).
#   scripts/report_screenshot.sh [OUT_DIR] [EPOCHS]     (default /tmp/strata_report, 2 epochs)
# Prints the page and the screenshot's paths; fails if chromium writes no image.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${STRATA_BUILD_DIR:-$root/build}"
out="${1:-/tmp/strata_report}"
epochs="${2:-2}"
strata="$build/strata"
[ -x "$strata" ] || { echo "no $strata: build first (scripts/setup.sh --build)" >&2; exit 1; }
if ! command -v chromium > /dev/null; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium
fi

rm -rf "$out"
mkdir -p "$out"
job="$root/configs/fashion_mnist_cnn.yaml"
"$strata" train "$job" --epochs "$epochs" --verbose 2 --log-dir "$out/one_device" \
  --trace "$out/one_device/trace.json" --trace-steps 20:40
timeout -k 5 1800 "$strata" launch --workers 2 -- "$strata" train "$job" --epochs "$epochs" --verbose 2 \
  --strategy multi_worker_mirrored --bytes-per-pack 65536 --log-dir "$out/two_workers" \
  --trace "$out/two_workers/trace.json" --trace-steps 20:40
"$strata" report --compare "$out/one_device" "$out/two_workers" -o "$out/report.html"

# --virtual-time-budget lets layout finish; no network is used (the page fetches nothing).
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1500 \
  --screenshot="$out/report.png" "file://$out/report.html" 2> "$out/chromium.log" || true
[ -s "$out/report.png" ] || { echo "chromium wrote no screenshot (see $out/chromium.log)" >&2; exit 1; }
echo "page: $out/report.html"
echo "screenshot: $out/report.png"
