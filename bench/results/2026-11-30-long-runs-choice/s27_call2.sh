#!/usr/bin/env bash
# Session 27, call 2: main + long runs of 512+ beside. Build main and crash in parallel; the GPU
# crash tests, then the GPU suite (not beside the crash tests) for the time left; call 3 the rest.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device
( cmake -S . -B $B/main -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B/main -j 16 ) > $out/r/build-main.log 2>&1 & p1=$!
( cmake -S . -B $B/crash -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_CRASH_POINTS=ON -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build $B/crash -j 16 --target gpu_crash_test crash_child ) > $out/r/build-crash.log 2>&1 & p2=$!
wait $p1 || { grep -B2 -A10 -m5 error $out/r/build-main.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
NEW=$B/main/bench/gpu_bench
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0 --workloads load,c,b,a,b,a"
run() {  # run NAME ARGS...
  local name=$1; shift
  local s=$(date +%s)
  timeout 60 $NEW "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name ($(( $(date +%s) - s )) s) rc=$?"
}
wait $p2; echo "crash build rc=$? at $(( $(date +%s) - t0 )) s"
timeout 100 $B/crash/tests/crash/gpu_crash_test > $out/r/gpu_crash.log 2>&1; echo "gpu_crash_test rc=$? at $(( $(date +%s) - t0 )) s"
GPHASH_CRASH_ENGINE=gpu GPHASH_KILLS=150 GPHASH_KILL_SECONDS=25 timeout 90 $B/main/tests/crash/kill_test > $out/r/kill.log 2>&1; echo "kill_test rc=$? at $(( $(date +%s) - t0 )) s"
tar czf $out/r.tgz -C $out r
left=$(( 565 - ($(date +%s) - t0) ))
t1=$(date +%s)
timeout $left ctest --test-dir $B/main -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 240 --output-on-failure > $out/r/gpu_tests.log 2>&1
echo "gpu suite rc=$? ($(( $(date +%s) - t1 )) s of $left): $(grep -E 'tests passed|tests failed' $out/r/gpu_tests.log)"
grep -E "^\s+[0-9]+ - .*(Failed|Timeout|Exception|Not Run)" $out/r/gpu_tests.log | head
grep -E "PASSED|FAILED" $out/r/gpu_crash.log | tail -2; tail -2 $out/r/kill.log
tar czf $out/r.tgz -C $out r
echo "==== done"
