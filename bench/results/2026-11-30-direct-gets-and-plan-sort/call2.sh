#!/usr/bin/env bash
# Session 30, call 2: the plan's one-launch cluster sort for batches up to 2^16 (plan_sort.cu)
# against cub's radix sort (GPHASH_DIAG_CUB_SORT=1, same build): its test, then YCSB at 2^16.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device/main
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B -j 16 ) > $out/r/build.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
$B/tests/gpu_plan_sort_test > $out/r/plan_sort_test.log 2>&1; echo "plan_sort_test rc=$? $(tail -1 $out/r/plan_sort_test.log)"
grep -E "FAILED|Failure|first at" $out/r/plan_sort_test.log | head
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0 --workloads load,c,b,a,b,a"
gpumem="--sections gpu-batches --placement gpu-memory --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 8 --ycsb-value-width 8 --workloads load,c,b,a,b,a"
bin=$B/bench/gpu_bench
run() {  # run NAME ENV... -- ARGS...
  local name=$1; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  [ $(( $(date +%s) - t0 )) -lt 540 ] || { echo "$name skipped"; return; }
  local s=$(date +%s)
  env "${envs[@]}" timeout 45 $bin "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name rc=$? ($(( $(date +%s) - s )) s)"
}
for rep in 1 2; do
  run small_m16_$rep X=1 -- $mapped --ycsb-batch 65536
  run cub_m16_$rep GPHASH_DIAG_CUB_SORT=1 -- $mapped --ycsb-batch 65536
done
run small_g16 X=1 -- $gpumem --ycsb-batch 65536
run cub_g16 GPHASH_DIAG_CUB_SORT=1 -- $gpumem --ycsb-batch 65536
run small_m16_3 X=1 -- $mapped --ycsb-batch 65536
run cub_m16_3 GPHASH_DIAG_CUB_SORT=1 -- $mapped --ycsb-batch 65536
echo "==== summary"
for f in $out/r/*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(f"{name:14s}", " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}(p{1e6*r["plan_seconds"]*65536/r["operations"]:.0f},k{1e6*r["kernel_seconds"]*65536/r["operations"]:.0f})' + ('' if r["not_found"]==0 and r["bad_values"]==0 else f'(nf {r["not_found"]},bad {r["bad_values"]})') for r in d["results"]))
PY
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
