#!/usr/bin/env bash
# On a GPU machine, in one command: builds, runs the GPU test suite and/or the GPU benchmarks, and
# prints a short summary last. Logs and JSON go to $GPHASH_OUT (default: build-device/out).
#
#   scripts/gpu_check.sh [tests|bench|all]     (default: all)
#
# tests: every GPU test (ctest -L gpu, which includes the GPU cases of suites shared with the CPU
#        engine), the GPU kill test, GPU crash injection and forced CUDA failures (from a
#        crash-point build), the device-session example.
# bench: gpu_bench (and, with GPHASH_BASELINE=DIR, the gpu_bench of an earlier source tree built
#        beside it, run in the same call on the same GPU, for before/after figures), the main job
#        with the GPU engine, and the server benchmark when memcached is in .deps/.
#
# Offline machines: fetch the Debian packages first (../shared/offline-deps/fetch-deps.sh, into
# .deps/), bring .deps/ along, and this script unpacks them. Builds go to build-device/ (ignored by
# git), so a machine that is still warm reuses them.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=${1:-all}
builds=$root/build-device
out=${GPHASH_OUT:-$builds/out}
mkdir -p "$builds" "$out"
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
source "$root/scripts/offline_deps.sh"
offline_deps "$root" || "$root/scripts/deps.sh"
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
jobs=$(nproc)

# The builds run side by side: the main tree, a crash-point tree for the injection tests, and the
# baseline's benchmark.
t0=$(date +%s)
build() {  # build NAME SOURCE TARGETS [CMAKE ARGS...]
  local name=$1 src=$2 targets=$3; shift 3
  { cmake -S "$src" -B "$builds/$name" "${cmake_args[@]}" "$@" && cmake --build "$builds/$name" -j "$jobs" $targets; } \
    >"$out/build-$name.log" 2>&1
}
pids=()
build main "$root" "" & pids+=($!)
if [[ $mode != bench ]]; then
  build crash "$root" "--target gpu_crash_test crash_child" -DGPHASH_CRASH_POINTS=ON -DGPHASH_BENCH=OFF & pids+=($!)
fi
if [[ $mode != tests && -n ${GPHASH_BASELINE:-} ]]; then
  build baseline "$GPHASH_BASELINE" "--target gpu_bench" -DGPHASH_TESTS=OFF & pids+=($!)
fi
for p in "${pids[@]}"; do
  if ! wait "$p"; then
    for log in "$out"/build-*.log; do grep -B2 -A12 -m3 -E "error|Error" "$log" | head -40; done
    echo "gpu_check: BUILD FAILED (logs in $out)"
    exit 1
  fi
done
echo "build: $(($(date +%s) - t0)) s"
main=$builds/main

if [[ $mode != bench ]]; then
  # Every GPU test, the GPU cases of suites that cover both engines among them (tests/CMakeLists.txt,
  # GPU_CASES).
  ctest --test-dir "$main" -L gpu --output-on-failure --timeout "${GPHASH_TEST_TIMEOUT:-300}" >"$out/gpu_tests.log" 2>&1 || status=1
  # SIGKILL with kernels in flight, recovered and verified by both engines.
  GPHASH_CRASH_ENGINE=gpu GPHASH_KILLS=${GPHASH_GPU_KILLS:-200} GPHASH_KILL_SECONDS=${GPHASH_GPU_KILL_SECONDS:-120} \
    "$main/tests/crash/kill_test" >"$out/gpu_kill_test.log" 2>&1 || status=1
  # A trap after the N-th store to the pool, and CUDA calls that fail in the middle of a batch.
  "$builds/crash/tests/crash/gpu_crash_test" >"$out/gpu_crash_test.log" 2>&1 || status=1
  "$main/examples/device_session" >"$out/device_session.log" 2>&1 || status=1
fi
if [[ $mode != tests ]]; then
  sections=${GPHASH_BENCH_SECTIONS:-hbm,mapped,kernels,resize}
  if [[ -x "$builds/baseline/bench/gpu_bench" ]]; then
    "$builds/baseline/bench/gpu_bench" --sections "$sections" --json "$out/gpu_bench_baseline.json" ${GPHASH_BENCH_ARGS:-} \
      >"$out/gpu_bench_baseline.log" 2>&1 || status=1
  fi
  "$main/bench/gpu_bench" --sections "$sections" --json "$out/gpu_bench.json" ${GPHASH_BENCH_ARGS:-} >"$out/gpu_bench.log" 2>&1 || status=1
  if [[ ${GPHASH_MAIN_JOB:-1} == 1 ]]; then
    "$main/gphash" bench --engine gpu --pool gphash-bench-gpu --no-progress --json "$out/main_job_gpu.json" \
      >"$out/main_job_gpu.log" 2>&1 || status=1
    rm -f /dev/shm/gphash-bench-gpu
  fi
fi

echo "==== summary"
if [[ $mode != bench ]]; then
  grep -E "tests passed|tests failed" "$out/gpu_tests.log" | sed 's/^/gpu tests: /'
  grep -hE "^\s+[0-9]+ - .*(Failed|Timeout|Exception)" "$out"/*_tests.log | head -20
  grep -E "kills|PASSED|FAILED" "$out/gpu_kill_test.log" | sed 's/^/gpu kill test: /' | head -4
  grep -E "traps verified|CUDA failures|PASSED|FAILED" "$out/gpu_crash_test.log" | sed 's/^/gpu crash test: /' | head -6
  sed 's/^/example: /' "$out/device_session.log" | tail -3
fi
if [[ $mode != tests ]]; then
  [[ -f "$out/gpu_bench_baseline.log" ]] && sed -n '/==== summary ====/,$p' "$out/gpu_bench_baseline.log" | tail -n +2 | sed 's/^/baseline: /'
  sed -n '/==== summary ====/,$p' "$out/gpu_bench.log" | tail -n +2 | sed 's/^/now: /'
  [[ -f "$out/main_job_gpu.log" ]] && sed -n '/^workload/,/^$/p' "$out/main_job_gpu.log" | sed 's/^/main job (gpu): /'
fi
exit $status
