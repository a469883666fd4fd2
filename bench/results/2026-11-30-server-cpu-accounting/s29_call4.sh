#!/usr/bin/env bash
# Session 29, call 4: the GPU tests that run alone, on main (after the legacy-stream wait):
# GpuMemoryFaults, gpu_contention_test, gpu_crash_test (crash points), the kill test with the GPU engine.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON -DGPHASH_BENCH=OFF -DGPHASH_SERVER=OFF "${cmake_args[@]}")
( cmake -S . -B $B/main "${common[@]}" && cmake --build $B/main -j 16 --target gpu_api_test gpu_cache_test kill_test crash_child ) > $out/r/build-main.log 2>&1 & p1=$!
( cmake -S . -B $B/crash "${common[@]}" -DGPHASH_CRASH_POINTS=ON && cmake --build $B/crash -j 16 --target gpu_crash_test crash_child ) > $out/r/build-crash.log 2>&1 & p2=$!
wait $p1 || { grep -B2 -A10 -m5 error $out/r/build-main.log | head -60; exit 1; }
echo "main build: $(( $(date +%s) - t0 )) s"
t1=$(date +%s)
ctest --test-dir $B/main -R "GpuMemoryFaults|gpu_contention" --timeout 400 --output-on-failure > $out/r/alone.log 2>&1
echo "alone rc=$? ($(( $(date +%s) - t1 )) s): $(grep -E 'tests passed|tests failed' $out/r/alone.log)"
grep -E "Test +#" $out/r/alone.log | sed 's/\.\.\.\.*/ /' | head
GPHASH_CRASH_ENGINE=gpu GPHASH_KILLS=150 GPHASH_KILL_SECONDS=25 timeout 90 $B/main/tests/crash/kill_test > $out/r/kill.log 2>&1; echo "kill_test (gpu) rc=$? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $out/r/kill.log | head -2) $(grep -i -m1 kills $out/r/kill.log)"
wait $p2 || { grep -B2 -A10 -m5 error $out/r/build-crash.log | head -40; }
echo "crash build done at $(( $(date +%s) - t0 )) s"
timeout 150 $B/crash/tests/crash/gpu_crash_test > $out/r/gpu_crash.log 2>&1; echo "gpu_crash_test rc=$? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $out/r/gpu_crash.log | head -2)"
tar czf $out/r.tgz -C $out r
echo "==== done $(( $(date +%s) - t0 )) s"
