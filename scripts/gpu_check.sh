#!/usr/bin/env bash
# On a GPU machine, in one command: builds everything, runs the whole GPU test suite and the GPU
# benchmark, and prints a short summary last. Logs and JSON go to $GPHASH_OUT (default: the
# build folder).
#
# Offline machines (no package registry): fetch the Debian packages first on a machine that has
# one (../shared/offline-deps/fetch-deps.sh, into .deps/), bring .deps/ along, and this script
# unpacks them. GPHASH_BENCH_ARGS passes arguments to gpu_bench (default: the full benchmark;
# --quick for a smoke run).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GPHASH_BUILD_DIR:-/tmp/gphash-gpu-build}
out=${GPHASH_OUT:-$build}
mkdir -p "$build" "$out"
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
if [[ -d "$root/.deps" ]] && ls "$root"/.deps/*.deb >/dev/null 2>&1; then
  deps=/tmp/gphash-deps
  mkdir -p "$deps"
  for f in "$root"/.deps/*.deb; do dpkg -x "$f" "$deps"; done
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  cmake_args+=(-DCMAKE_PREFIX_PATH="$deps/usr" -DCMAKE_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu"
               -DCMAKE_INCLUDE_PATH="$deps/usr/include")
else
  "$root/scripts/deps.sh"
fi
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
t0=$(date +%s)
if ! { cmake -S "$root" -B "$build" "${cmake_args[@]}" && cmake --build "$build" -j "$(nproc)"; } >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log"
  echo "gpu_check: BUILD FAILED (log: $out/build.log)"
  exit 1
fi
echo "build: $(($(date +%s) - t0)) s"
ctest --test-dir "$build" -L gpu --output-on-failure --timeout 900 >"$out/gpu_tests.log" 2>&1 || status=1
ctest --test-dir "$build" -L cpu -j "$(nproc)" --timeout 900 >"$out/cpu_tests.log" 2>&1 || status=1
"$build/bench/gpu_bench" ${GPHASH_BENCH_ARGS:-} --json "$out/gpu_bench.json" >"$out/gpu_bench.log" 2>&1 || status=1
echo "==== summary"
grep -E "tests passed|tests failed|Total Test" "$out/gpu_tests.log" | sed 's/^/gpu tests: /'
grep -E "tests passed|tests failed|Total Test" "$out/cpu_tests.log" | sed 's/^/cpu tests: /'
grep -E "^\s+[0-9]+ - .*(Failed|Timeout|Exception)" "$out/gpu_tests.log" "$out/cpu_tests.log" | head -20
sed -n '/==== summary ====/,$p' "$out/gpu_bench.log" | tail -n +2
exit $status
