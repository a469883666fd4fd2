#!/usr/bin/env bash
# GPHash's evaluation, every system side by side in one run (bench/evaluate.py says what runs).
# Installs what is missing (matplotlib for the plots), builds, runs the chosen parts and writes
# results.json, PNG plots and report.md. Without a GPU only the CPU systems run.
#
#   scripts/evaluate.sh --quick                       (minutes; CPU-only on a machine without a GPU)
#   scripts/evaluate.sh --out bench/results/NAME      (the medium size: about 12 minutes on the H100)
#   scripts/evaluate.sh --size paper --parts micro    (the paper's sizes, one part at a time)
#
# On a machine without the internet (the lent GPU machine) call bench/evaluate.py directly.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GPHASH_BUILD_DIR:-$root/build}
GPHASH_DEPS_EXTRA="python3-matplotlib ${GPHASH_DEPS_EXTRA:-}" "$root/scripts/deps.sh"
"$root/scripts/build.sh" >/dev/null
args=()
out=$build/evaluation
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) args+=(--size quick) ;;
    --out) out=$2; shift ;;
    *) args+=("$1") ;;
  esac
  shift
done
exec python3 "$root/bench/evaluate.py" run --build-dir "$build" --out "$out" "${args[@]}"
