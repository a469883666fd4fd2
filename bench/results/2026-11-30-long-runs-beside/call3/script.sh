#!/usr/bin/env bash
# Session 23, call 3: long runs beside the batch kernel (listed by the plan) and a 24-bit plan up
# to 2^16, with GPHASH_AB_LONG (bit 1: long runs after the batch kernel as before, bit 2: 32-bit
# plan as before), alternating in one build. Build main + crash (for call 4), benches, tests.
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
run() {  # run NAME AB ARGS...
  local name=$1 ab=$2; shift 2
  local s=$(date +%s)
  GPHASH_AB_LONG=$ab timeout 90 $NEW "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name ($(( $(date +%s) - s )) s) rc=$?"
}
run m16_ab0 0 $mapped --ycsb-batch 65536
run m16_ab3 3 $mapped --ycsb-batch 65536
run m16_ab1 1 $mapped --ycsb-batch 65536
run m16_ab2 2 $mapped --ycsb-batch 65536
run m16_ab0b 0 $mapped --ycsb-batch 65536
run m16_ab3b 3 $mapped --ycsb-batch 65536
run m20_ab0 0 $mapped --ycsb-batch 1048576
run m20_ab1 1 $mapped --ycsb-batch 1048576
run h20_ab0 0 $hbm --ycsb-batch 1048576
run h20_ab1 1 $hbm --ycsb-batch 1048576
run h16_ab0 0 $hbm --ycsb-batch 65536
run h16_ab3 3 $hbm --ycsb-batch 65536
t1=$(date +%s)
timeout 200 $B/main/tests/gpu_engine_test --gtest_filter='*LongRun*:*HotKey*:*Duplicate*:*Repeat*:*FreedCells*:*Unplanned*' > $out/r/targeted.log 2>&1; echo "targeted rc=$? $(( $(date +%s) - t1 )) s: $(grep -E '^\[  (PASSED|FAILED)' $out/r/targeted.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $out/r/targeted.log | head
wait $p2; echo "crash build rc=$? at $(( $(date +%s) - t0 )) s"
tar czf $out/r.tgz -C $out r
echo "==== summary"
for f in $out/r/[mh]*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(name, " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}[p{r["plan_seconds"]*1e3:.0f}k{r["kernel_seconds"]*1e3:.0f}]' + ('' if r["not_found"]==0 and r["bad_values"]==0 else f'(nf {r["not_found"]},bad {r["bad_values"]})') for r in d["results"]))
PY
done
