#!/usr/bin/env bash
# Session 28, call 2: main with answered searches + serial_grid (landed) and the GPU rehash's
# displacement (working tree). Build all + crash tree; GPU suite; kv_store_test on the GPU engine;
# GPU crash tests; server_bench ENGINE=gpu DEPTH=1 for the time left.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device
left() { echo $(( 575 - ($(date +%s) - t0) )); }
( cmake -S . -B $B/main -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B/main -j 16 ) > $out/r/build-main.log 2>&1 & p1=$!
( cmake -S . -B $B/crash -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_CRASH_POINTS=ON -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build $B/crash -j 16 --target gpu_crash_test crash_child ) > $out/r/build-crash.log 2>&1 & p2=$!
wait $p1 || { grep -B2 -A10 -m5 error $out/r/build-main.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
t1=$(date +%s)
timeout $(( $(left) - 150 )) ctest --test-dir $B/main -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 240 --output-on-failure > $out/r/gpu_tests.log 2>&1
echo "gpu suite rc=$? ($(( $(date +%s) - t1 )) s): $(grep -E 'tests passed|tests failed' $out/r/gpu_tests.log)"
grep -E "^\s+[0-9]+ - .*(Failed|Timeout|Exception|Not Run)" $out/r/gpu_tests.log | head
grep -E "ResumedResize" $out/r/gpu_tests.log | head -3
GPHASH_KV_TEST_ENGINE=gpu timeout 120 $B/main/tests/server/kv_store_test > $out/r/kv_gpu.log 2>&1; echo "kv_store_test (gpu) rc=$?: $(grep -E '^\[  (PASSED|FAILED)' $out/r/kv_gpu.log | head -3)"
wait $p2; echo "crash build rc=$? at $(( $(date +%s) - t0 )) s"
timeout 100 $B/crash/tests/crash/gpu_crash_test > $out/r/gpu_crash.log 2>&1; echo "gpu_crash_test rc=$? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $out/r/gpu_crash.log | head -2)"
GPHASH_CRASH_ENGINE=gpu GPHASH_KILLS=150 GPHASH_KILL_SECONDS=25 timeout 90 $B/main/tests/crash/kill_test > $out/r/kill.log 2>&1; echo "kill_test rc=$? at $(( $(date +%s) - t0 )) s: $(tail -1 $out/r/kill.log)"
tar czf $out/r.tgz -C $out r
if [ $(left) -gt 60 ]; then
  t1=$(date +%s)
  env QUICK=1 REPEAT=1 SERVER_THREADS=8 LOADGEN_THREADS=8 CONNECTIONS=128 DEPTH=1 RUN_SECONDS=3 ENGINE=gpu \
    GPHASH_SERVER=$B/main/gphash-server LOADGEN=$B/main/gphash-server-loadgen \
    OUT=$out/r/d1_after.json timeout $(left) scripts/server_bench.sh > $out/r/d1_after.log 2>&1
  echo "d1 after: rc=$? ($(( $(date +%s) - t1 )) s)"; sed -n '/ns per key/,$p' $out/r/d1_after.log
else echo "d1 skipped"; fi
tar czf $out/r.tgz -C $out r
echo "==== done $(( $(date +%s) - t0 )) s"
