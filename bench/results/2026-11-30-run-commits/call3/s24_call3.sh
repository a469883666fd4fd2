#!/usr/bin/env bash
# Session 24, call 3: what call 2 could not finish on the same tree (it ran them side by side and
# out of time): the two serial GPU tests, then gpu_crash_test and the GPU kill test, one at a time.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device
( cmake -S . -B $B/main -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build $B/main -j 16 --target gpu_api_test gpu_cache_test kill_test crash_child ) > $out/r/build-main.log 2>&1 & p1=$!
( cmake -S . -B $B/crash -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_CRASH_POINTS=ON -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build $B/crash -j 16 --target gpu_crash_test crash_child ) > $out/r/build-crash.log 2>&1 & p2=$!
wait $p1 || { grep -B2 -A10 -m5 error $out/r/build-main.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "main build: $(( $(date +%s) - t0 )) s"
t1=$(date +%s)
ctest --test-dir $B/main -R "gpu_contention_test|GpuMemoryFaults" --timeout 240 --output-on-failure > $out/r/serial_tests.log 2>&1
echo "serial GPU tests rc=$? ($(( $(date +%s) - t1 )) s): $(grep -E 'tests passed|tests failed' $out/r/serial_tests.log)"
grep -E "Test +#" $out/r/serial_tests.log
wait $p2; echo "crash build rc=$? at $(( $(date +%s) - t0 )) s"
t1=$(date +%s)
timeout 150 $B/crash/tests/crash/gpu_crash_test > $out/r/gpu_crash.log 2>&1; echo "gpu_crash_test rc=$? ($(( $(date +%s) - t1 )) s)"
grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED  \]" $out/r/gpu_crash.log | tail -5
t1=$(date +%s)
GPHASH_CRASH_ENGINE=gpu GPHASH_KILLS=200 GPHASH_KILL_SECONDS=40 timeout 150 $B/main/tests/crash/kill_test > $out/r/kill.log 2>&1; echo "kill_test rc=$? ($(( $(date +%s) - t1 )) s)"
grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED  \]|kills|acknowledged" $out/r/kill.log | tail -6
tar czf $out/r.tgz -C $out r
