#!/usr/bin/env bash
# Session 21, call 3: the final tree's GPU suite, the GPU crash injection and kill test, then
# YCSB host-mapped with the complete cache (2^20, 2^16) and in GPU memory. Summary last.
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
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --workloads load,c,b,a,b,a --cache lfu --cache-fraction 1.0"
hbm="--sections gpu-batches --placement gpu-memory --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 8 --ycsb-value-width 8 --workloads load,c,b,a"
run() {  # run NAME ARGS...
  local name=$1; shift
  local s=$(date +%s)
  timeout 60 $NEW "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name ($(( $(date +%s) - s )) s) rc=$?"
}
run m20 $mapped --ycsb-batch 1048576
run m16 $mapped --ycsb-batch 65536
run h20 $hbm --ycsb-batch 1048576
t1=$(date +%s)
ctest --test-dir $B/main -L gpu -j 12 --timeout 240 --output-on-failure > $out/r/gpu_tests.log 2>&1
echo "gpu suite ($(( $(date +%s) - t1 )) s): $(grep -E 'tests passed|tests failed' $out/r/gpu_tests.log)"
grep -E "^\s+[0-9]+ - .*(Failed|Timeout|Exception)" $out/r/gpu_tests.log | head
wait $p2 || { grep -B2 -A10 -m5 error $out/r/build-crash.log | head -60; }
t1=$(date +%s)
timeout 120 "$B/crash/tests/crash/gpu_crash_test" > $out/r/gpu_crash_test.log 2>&1; echo "gpu crash test rc=$? ($(( $(date +%s) - t1 )) s): $(grep -E 'traps verified|CUDA failures|PASSED|FAILED' $out/r/gpu_crash_test.log | tr '\n' ' ')"
left=$(( 575 - ($(date +%s) - t0) ))
if (( left > 35 )); then
  t1=$(date +%s)
  GPHASH_CRASH_ENGINE=gpu GPHASH_KILLS=200 GPHASH_KILL_SECONDS=$(( left - 15 < 50 ? left - 15 : 50 )) timeout $(( left - 5 )) "$B/main/tests/crash/kill_test" > $out/r/gpu_kill_test.log 2>&1; echo "gpu kill test rc=$? ($(( $(date +%s) - t1 )) s): $(grep -E 'kills|PASSED|FAILED' $out/r/gpu_kill_test.log | head -3 | tr '\n' ' ')"
else echo "gpu kill test skipped: ${left} s left"; fi
tar czf $out/r.tgz -C $out r
echo "==== summary"
for f in $out/r/*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(name, " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}(p50 {r["batch_p50_seconds"]*1e3:.2f}ms,nf {r["not_found"]},bad {r["bad_values"]})' for r in d["results"]))
PY
done
