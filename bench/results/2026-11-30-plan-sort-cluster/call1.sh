#!/usr/bin/env bash
# Session 32, call 1: the plan's sort with 11-bit digits (3 onesweep passes instead of 4) for small
# host-mapped batches, variants by GPHASH_PLAN_SORT (0: landed 256x4 8-bit; 1: 64x8 11-bit; 2:
# 64x16 11-bit; 3: 64x4 11-bit): full build, the sort test under each, YCSB A at 2^16 host-mapped,
# alternating variants.
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
for v in 0 1 2 3; do GPHASH_PLAN_SORT=$v $B/tests/gpu_plan_sort_test > $out/r/plan_sort_test_$v.log 2>&1; echo "plan_sort_test v$v rc=$? $(tail -1 $out/r/plan_sort_test_$v.log)"; done
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0 --workloads load,b,a,a,a"
bin=$B/bench/gpu_bench
run() { local name=$1 v=$2; shift 2; local s=$(date +%s)
  GPHASH_PLAN_SORT=$v timeout 70 $bin "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1; echo "$name rc=$? ($(( $(date +%s) - s )) s)"; }
for rep in 1 2; do for v in 0 1 2 3; do
  [ $(( $(date +%s) - t0 )) -lt 520 ] && run m16_v${v}_$rep $v $mapped --ycsb-batch 65536
done; done
for f in $out/r/*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(f"{name:10s}", " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.1f}/{r["ops_per_second"]/1e6:.0f}(p{1e6*r["plan_seconds"]*65536/r["operations"]:.1f})' for r in d["results"]))
PY
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
