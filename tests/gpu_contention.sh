#!/usr/bin/env bash
# GPU stress: a short growing-table case of gpu_cache_test, run as many short processes, several
# at once. Processes starting and ending beside each other (context creation, memory
# registration) delay copies and kernels relative to the host, which is what exposed the slow
# path's unordered copy of its pending runs: before the fix (2026-11-24) about 5% of these runs
# failed; long-running processes side by side did not show it.
# Usage: gpu_contention.sh GPU_CACHE_TEST [PROCESSES] [ROUNDS] [FILTER]
set -u
test_binary=$1
processes=${2:-6}
rounds=${3:-30}
filter=${4:-SkewedGrowth.*}
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
if "$test_binary" --gtest_filter="$filter" >"$log/probe" 2>&1 && grep -q "no GPU" "$log/probe"; then echo "no GPU: skipped"; exit 0; fi
for p in $(seq 1 "$processes"); do
  ( for r in $(seq 1 "$rounds"); do
      "$test_binary" --gtest_filter="$filter" >"$log/$p.$r" 2>&1 || echo "$p.$r" >>"$log/failed"
    done ) &
done
wait
if [ -s "$log/failed" ]; then
  echo "$(wc -l <"$log/failed") of $((processes * rounds)) runs failed:"
  for f in $(head -3 "$log/failed"); do grep -m2 -A6 Failure "$log/$f"; done
  exit 1
fi
echo "all $((processes * rounds)) runs passed ($processes processes at once)"
