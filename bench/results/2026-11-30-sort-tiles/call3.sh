#!/usr/bin/env bash
# Session 31 call 3: the landed plan sort (small tiles for host-mapped batches up to 2^17, no knob):
# full build, its test, the GPU suite, YCSB at 2^16 host-mapped (3 runs) and in GPU memory (2),
# and at 2^20 host-mapped once (unchanged code path: n > 2^17).
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
(cd $B && ctest -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 300 > $out/r/gpu_suite.log 2>&1); echo "gpu suite rc=$? $(grep -E 'tests passed|tests failed' $out/r/gpu_suite.log) ($(( $(date +%s) - t0 )) s)"
grep -A20 "tests failed" $out/r/gpu_suite.log | head -20
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0 --workloads load,c,b,a,b,a"
gpumem="--sections gpu-batches --placement gpu-memory --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 8 --ycsb-value-width 8 --workloads load,c,b,a,b,a"
bin=$B/bench/gpu_bench
run() { local name=$1; shift; local s=$(date +%s)
  timeout 60 $bin "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1; echo "$name rc=$? ($(( $(date +%s) - s )) s)"; }
for rep in 1 2 3; do run m16_$rep $mapped --ycsb-batch 65536; done
for rep in 1 2; do run g16_$rep $gpumem --ycsb-batch 65536; done
[ $(( $(date +%s) - t0 )) -lt 480 ] && run m20_1 $mapped --ycsb-batch 1048576
for f in $out/r/*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(f"{name:6s}", " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}(p{1e6*r["plan_seconds"]*65536/r["operations"]:.0f})' for r in d["results"]))
PY
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
