#!/usr/bin/env bash
# On a GPU machine, in one command: builds libGPM's targets (build-device/gpm, Release) and a
# crash-point build of the GPM crash test (build-device/gpm-crash), runs every GPM GPU test, the kill
# test and the trap-after-N-stores injection, then gpm_bench; logs and JSON go to
# ${GPHASH_OUT:-build-device/gpm-out}; a short PASS/FAIL summary is printed last.
#   GPHASH_GPM_KILLS=N      kills per workload (default 3; 9 workloads)
#   GPHASH_GPM_BENCH_ARGS   extra gpm_bench arguments (e.g. --sections kvs,db)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
builds=$root/build-device
out=${GPHASH_OUT:-$builds/gpm-out}
mkdir -p "$builds" "$out"
source "$root/scripts/offline_deps.sh"
offline_deps "$root" || "$root/scripts/deps.sh"
jobs=$(nproc)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
t0=$(date +%s)
build() {  # build NAME TARGETS [CMAKE ARGS...]
  local name=$1 targets=$2; shift 2
  { cmake -S "$root" -B "$builds/$name" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPHASH_REQUIRE_CUDA=ON "$@" &&
    cmake --build "$builds/$name" -j "$jobs" --target $targets; } >"$out/build-$name.log" 2>&1
}
build gpm "gpm_test gpm_gpu_test gpm_crash_test gpm_crash_child gpm_bench" & p1=$!
build gpm-crash "gpm_crash_test gpm_crash_child" -DGPHASH_CRASH_POINTS=ON -DGPHASH_BENCH=OFF & p2=$!
fail=0
for p in $p1 $p2; do wait $p || fail=1; done
if [[ $fail == 1 ]]; then
  for log in "$out"/build-*.log; do grep -B2 -A12 -m3 -E "error|Error" "$log" | head -40; done
  echo "gpm_device: BUILD FAILED (logs in $out)"
  exit 1
fi
echo "build: $(($(date +%s) - t0)) s"
status=0
result() { if [[ $2 == 0 ]]; then echo "PASS $1"; else echo "FAIL $1 (see $out/$3)"; status=1; fi; }
main=$builds/gpm
crash=$builds/gpm-crash
timeout 120 "$main/tests/gpm_test" >"$out/gpm_test.log" 2>&1; r_cpu=$?
timeout 240 "$main/tests/gpm_gpu_test" >"$out/gpm_gpu_test.log" 2>&1; r_gpu=$?
GPHASH_GPM_KILLS=${GPHASH_GPM_KILLS:-3} timeout 150 "$main/tests/crash/gpm_crash_test" --gtest_filter='GpmKill.*' \
  >"$out/gpm_kill_test.log" 2>&1; r_kill=$?
timeout 200 "$crash/tests/crash/gpm_crash_test" --gtest_filter='GpmTrap.*' >"$out/gpm_trap_test.log" 2>&1; r_trap=$?
timeout 200 "$main/bench/gpm_bench" --json "$out/gpm_bench.json" ${GPHASH_GPM_BENCH_ARGS:-} >"$out/gpm_bench.log" 2>&1; r_bench=$?
rm -f /dev/shm/gphash-gpmcrash-* /dev/shm/gphash-gpmbench-*
echo "==== summary"
sed -n '/==== summary ====/,$p' "$out/gpm_bench.log" | tail -n +2 | sed 's/^/bench: /'
grep -hE "kills verified|traps verified" "$out/gpm_kill_test.log" "$out/gpm_trap_test.log"
grep -hE "^\[  (PASSED|FAILED|SKIPPED) " "$out"/gpm_*test.log | sed 's/^/gtest: /' | head -20
result "gpm_test (cpu)" $r_cpu gpm_test.log
result "gpm_gpu_test" $r_gpu gpm_gpu_test.log
result "gpm kill test" $r_kill gpm_kill_test.log
result "gpm trap injection" $r_trap gpm_trap_test.log
result "gpm_bench" $r_bench gpm_bench.log
exit $status
