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
# The GPU cases of suites that cover both engines (labelled cpu: they skip the GPU elsewhere).
ctest --test-dir "$build" -L cpu -R "(/gpu$|GpuEngine)" --output-on-failure --timeout 900 >"$out/gpu_cases_tests.log" 2>&1 || status=1
# The CPU tests run in CI; here only on request (GPHASH_CHECK_CPU=1), to fit one 10-minute call.
if [[ ${GPHASH_CHECK_CPU:-0} == 1 ]]; then
  ctest --test-dir "$build" -L cpu -j "$(nproc)" --timeout 900 >"$out/cpu_tests.log" 2>&1 || status=1
fi
# The crash tests against the GPU engine: SIGKILL with kernels in flight, recovered and verified
# by both engines; then GPU crash injection (a trap after the N-th persistent store).
if [[ -x "$build/tests/crash/kill_test" ]]; then
  GPHASH_CRASH_ENGINE=gpu GPHASH_KILLS=${GPHASH_GPU_KILLS:-200} GPHASH_KILL_SECONDS=${GPHASH_GPU_KILL_SECONDS:-150} \
    "$build/tests/crash/kill_test" >"$out/gpu_kill_test.log" 2>&1 || status=1
fi
"$build/bench/gpu_bench" ${GPHASH_BENCH_ARGS:-} --json "$out/gpu_bench.json" >"$out/gpu_bench.log" 2>&1 || status=1
# The main job with the GPU engine (host arrays: keys and values cross PCIe).
"$build/gphash" bench --engine gpu --pool gphash-bench-gpu --no-progress --json "$out/main_job_gpu.json" \
  >"$out/main_job_gpu.log" 2>&1 || status=1
rm -f /dev/shm/gphash-bench-gpu
echo "==== summary"
grep -E "tests passed|tests failed|Total Test" "$out/gpu_tests.log" | sed 's/^/gpu tests: /'
grep -E "tests passed|tests failed" "$out/gpu_cases_tests.log" | sed 's/^/gpu cases of shared suites: /'
[[ -f "$out/cpu_tests.log" ]] && grep -E "tests passed|tests failed|Total Test" "$out/cpu_tests.log" | sed 's/^/cpu tests: /'
grep -hE "^\s+[0-9]+ - .*(Failed|Timeout|Exception)" "$out"/*_tests.log | head -20
[[ -f "$out/gpu_kill_test.log" ]] && grep -E "kills|PASSED|FAILED" "$out/gpu_kill_test.log" | sed 's/^/gpu kill test: /' | head -5
sed -n '/==== summary ====/,$p' "$out/gpu_bench.log" | tail -n +2
sed -n '/^workload/,/^$/p' "$out/main_job_gpu.log" | sed 's/^/main job (gpu): /'
exit $status
