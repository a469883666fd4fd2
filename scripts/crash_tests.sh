#!/usr/bin/env bash
# Crash-consistency tests (DESIGN.md section 5, tier 2), CI-sized: builds a separate tree with the
# named crash points compiled in and runs
#   kill_test         SIGKILL at random moments (GPHASH_KILLS kills, default 200)
#   crash_point_test  SIGKILL at every named crash point, also during recovery
#   lost_store_test   crash images with unflushed stores lost (GPHASH_LOST_STORE_IMAGES per config)
#   snapshot_crash_test  SIGKILL during snapshots, at random and at every named snapshot point
# then prints each test's summary. Exit status: 0 when all passed.
#
# Environment (all optional): GPHASH_CRASH_BUILD_DIR (default build-crash), GPHASH_KILLS,
# GPHASH_KILL_SECONDS, GPHASH_LOST_STORE_IMAGES, GPHASH_CRASH_SEED (default 1; use another to
# explore), GPHASH_CRASH_ENGINE (cpu or gpu: the engine the children run).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${GPHASH_CRASH_BUILD_DIR:-$root/build-crash}
logs=$build/crash-logs
export GPHASH_KILLS=${GPHASH_KILLS:-200}
export GPHASH_KILL_SECONDS=${GPHASH_KILL_SECONDS:-170}
export GPHASH_LOST_STORE_IMAGES=${GPHASH_LOST_STORE_IMAGES:-5000}
export GPHASH_CRASH_SEED=${GPHASH_CRASH_SEED:-1}

start=$(date +%s)
echo "== configure and build ($build, crash points on, no CUDA)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPHASH_CRASH_POINTS=ON -DGPHASH_CUDA=OFF \
  -DGPHASH_TESTS=ON -DGPHASH_BENCH=OFF >/dev/null || exit 1
cmake --build "$build" --target crash_child kill_test crash_point_test lost_store_test snapshot_child \
  snapshot_crash_test || exit 1
built=$(date +%s)
mkdir -p "$logs"

failed=()
run() {
  local name=$1
  local t0=$(date +%s)
  echo "== $name"
  if "$build/tests/${2:-}$name" --gtest_color=no >"$logs/$name.log" 2>&1; then
    echo "   passed in $(( $(date +%s) - t0 )) s"
  else
    echo "   FAILED in $(( $(date +%s) - t0 )) s (full log: $logs/$name.log); failures:"
    grep -A12 -E "Failure$" "$logs/$name.log" | head -60 | sed 's/^/     /'
    failed+=("$name")
  fi
}
run kill_test crash/
run crash_point_test crash/
run lost_store_test crash/
run snapshot_crash_test

echo
echo "== summary (seed $GPHASH_CRASH_SEED; build $(( built - start )) s, tests $(( $(date +%s) - built )) s)"
grep -h -E "^\[(kill_test|crash_point_test|lost_store_test|snapshot_crash_test)\]" "$logs"/*.log
if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all crash tests passed"
