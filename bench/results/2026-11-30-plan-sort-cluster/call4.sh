#!/usr/bin/env bash
# Session 32, call 4: the plan's sort of batches up to 2^16 in one kernel on a thread block cluster
# (GPHASH_PLAN_SORT: cub = the landed onesweep; c1024 = 8 x 1024 threads x 8; default = 8 x 512 x
# 16 on host-mapped tables; all = the default also in GPU memory): full build, the sort test under
# each, the GPU suite (default), YCSB at 2^16 host-mapped and in GPU memory, alternating.
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
for v in default c1024 all cub; do GPHASH_PLAN_SORT=$v $B/tests/gpu_plan_sort_test > $out/r/plan_sort_test_$v.log 2>&1; echo "plan_sort_test $v rc=$? $(tail -1 $out/r/plan_sort_test_$v.log)"; done
grep -h "Failure\|first at" $out/r/plan_sort_test_*.log | head -10
(cd $B && ctest -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 300 > $out/r/gpu_suite.log 2>&1); echo "gpu suite rc=$? $(grep -E 'tests passed|tests failed' $out/r/gpu_suite.log) ($(( $(date +%s) - t0 )) s)"
grep -A20 "tests failed" $out/r/gpu_suite.log | head -20
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0 --workloads load,b,a,b,a"
gpumem="--sections gpu-batches --placement gpu-memory --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 8 --ycsb-value-width 8 --workloads load,c,b,a,b,a"
bin=$B/bench/gpu_bench
run() { local name=$1 v=$2; shift 2; local s=$(date +%s)
  [ $(( s - t0 )) -gt 560 ] && { echo "skip $name"; return; }
  GPHASH_PLAN_SORT=$v timeout 40 $bin "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1; echo "$name rc=$? ($(( $(date +%s) - s )) s)"; }
for rep in 1 2; do
  run m16_cub_$rep cub $mapped --ycsb-batch 65536
  run m16_c512_$rep default $mapped --ycsb-batch 65536
  run m16_c1024_$rep c1024 $mapped --ycsb-batch 65536
done
run g16_cub_1 cub $gpumem --ycsb-batch 65536
run g16_all_1 all $gpumem --ycsb-batch 65536
run m16_c512_3 default $mapped --ycsb-batch 65536
run m16_cub_3 cub $mapped --ycsb-batch 65536
for f in $out/r/*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(f"{name:11s}", " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.1f}/{r["ops_per_second"]/1e6:.0f}(p{1e6*r["plan_seconds"]*65536/r["operations"]:.1f})' for r in d["results"]))
PY
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
