#!/usr/bin/env bash
# Session 31 candidate call: branch next/s30-cub-small-tiles (checked out in the working tree):
# the plan's sort with cub's onesweep on smaller tiles for batches up to 2^17
# (GPHASH_DIAG_SORT_TILES=cub|128x8|256x4|256x8|384x8), its test, YCSB at 2^16 host-mapped and
# GPU memory, alternating; then the GPU suite if time is left.
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
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0 --workloads load,c,b,a,b,a --ycsb-batch 65536"
gpumem="--sections gpu-batches --placement gpu-memory --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 8 --ycsb-value-width 8 --workloads load,c,b,a,b,a --ycsb-batch 65536"
bin=$B/bench/gpu_bench
run() { local name=$1 v=$2; shift 2; local s=$(date +%s)
  GPHASH_DIAG_SORT_TILES=$v timeout 45 $bin "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1; echo "$name rc=$? ($(( $(date +%s) - s )) s)"; }
for rep in 1 2; do for v in cub 256x4 128x8 256x8; do run ${v}_m16_$rep $v $mapped; done; done
for v in cub 256x4; do run ${v}_g16 $v $gpumem; done
for f in $out/r/*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(f"{name:12s}", " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}(p{1e6*r["plan_seconds"]*65536/r["operations"]:.0f})' for r in d["results"]))
PY
done
if [ $(( $(date +%s) - t0 )) -lt 420 ]; then
  (cd $B && ctest -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 300 > $out/r/gpu_suite.log 2>&1); echo "gpu suite rc=$? $(grep -E 'tests passed|tests failed' $out/r/gpu_suite.log)"
fi
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
