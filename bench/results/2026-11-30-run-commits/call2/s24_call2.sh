#!/usr/bin/env bash
# Session 24, call 2: main + deferred run commits + run writes into BktCache lines. Build main and
# crash in parallel, YCSB host-mapped 2^16 (x2) and 2^20, GPU memory 2^16, then the GPU suite
# with the crash tests beside it.
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
hbm="--sections gpu-batches --placement gpu-memory --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 8 --ycsb-value-width 8 --workloads load,c,b,a"
run() {  # run NAME ARGS...
  local name=$1; shift
  local s=$(date +%s)
  timeout 90 $NEW "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name ($(( $(date +%s) - s )) s) rc=$?"
}
run m16_1 $mapped --ycsb-batch 65536
run m20 $mapped --ycsb-batch 1048576
run m16_2 $mapped --ycsb-batch 65536
run h16 $hbm --ycsb-batch 65536
wait $p2; echo "crash build rc=$? at $(( $(date +%s) - t0 )) s"
( timeout 120 $B/crash/tests/crash/gpu_crash_test > $out/r/gpu_crash.log 2>&1; echo "gpu_crash_test rc=$?" > $out/r/crash_rc.txt
  GPHASH_CRASH_ENGINE=gpu GPHASH_KILLS=200 GPHASH_KILL_SECONDS=40 timeout 120 $B/main/tests/crash/kill_test > $out/r/kill.log 2>&1; echo "kill_test rc=$?" >> $out/r/crash_rc.txt ) &
left=$(( 585 - ($(date +%s) - t0) ))
t1=$(date +%s)
timeout $left ctest --test-dir $B/main -L gpu -j 12 --timeout 240 --output-on-failure > $out/r/gpu_tests.log 2>&1
echo "gpu suite rc=$? ($(( $(date +%s) - t1 )) s of $left): $(grep -E 'tests passed|tests failed' $out/r/gpu_tests.log)"
grep -E "^\s+[0-9]+ - .*(Failed|Timeout|Exception|Not Run)" $out/r/gpu_tests.log | head
wait
cat $out/r/crash_rc.txt; grep -E "PASSED|FAILED|passed|failed" $out/r/gpu_crash.log | tail -3; tail -2 $out/r/kill.log
tar czf $out/r.tgz -C $out r
echo "==== summary"
for f in $out/r/[mh]*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(name, " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}[p{r["plan_seconds"]*1e3:.0f}k{r["kernel_seconds"]*1e3:.0f}]in{r.get("pcie_in_bytes_per_op",0):.1f}' + ('' if r["not_found"]==0 and r["bad_values"]==0 else f'(nf {r["not_found"]},bad {r["bad_values"]})') for r in d["results"]))
PY
done
