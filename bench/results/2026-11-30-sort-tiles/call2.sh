#!/usr/bin/env bash
# Session 31 call 2: more onesweep tiles for the plan's sort at 2^16 (512x2, 512x4, 256x2 against
# 256x4), then ncu kernel durations of YCSB A at 2^16 host-mapped with 256x4.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device/main
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON -DGPHASH_TESTS=ON "${cmake_args[@]}" && cmake --build $B -j 16 --target gpu_bench gpu_plan_sort_test ) > $out/r/build.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
for v in 512x2 512x4 256x2; do GPHASH_DIAG_SORT_TILES=$v $B/tests/gpu_plan_sort_test > $out/r/plan_sort_test_$v.log 2>&1; echo "plan_sort_test $v rc=$? $(tail -1 $out/r/plan_sort_test_$v.log)"; done
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0 --workloads load,c,b,a,b,a --ycsb-batch 65536"
gpumem="--sections gpu-batches --placement gpu-memory --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 8 --ycsb-value-width 8 --workloads load,c,b,a,b,a --ycsb-batch 65536"
bin=$B/bench/gpu_bench
run() { local name=$1 v=$2; shift 2; local s=$(date +%s)
  GPHASH_DIAG_SORT_TILES=$v timeout 45 $bin "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1; echo "$name rc=$? ($(( $(date +%s) - s )) s)"; }
for rep in 1 2; do for v in 256x4 512x2 512x4 256x2; do run ${v}_m16_$rep $v $mapped; done; done
for v in 256x4 512x2 cub; do run ${v}_g16 $v $gpumem; done
for f in $out/r/*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(f"{name:12s}", " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}(p{1e6*r["plan_seconds"]*65536/r["operations"]:.0f})' for r in d["results"]))
PY
done
args="$mapped --operations 4194304"
GPHASH_DIAG_SORT_TILES=256x4 timeout 200 ncu --clock-control none --cache-control none --profile-from-start off --metrics gpu__time_duration.sum --csv --print-units base \
      $bin $args --profile-workload 3 > $out/r/ncu_a.csv 2> $out/r/ncu_a.err; echo "ncu_a rc=$? $(( $(date +%s) - t0 )) s"
python3 - $out/r/ncu_a.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value")
agg = collections.OrderedDict()
for r in rows[1:]:
    try: v = float(r[vi])
    except ValueError: continue
    k = r[ki][:70]; a = agg.setdefault(k, [0, 0.0]); a[0] += 1; a[1] += v
tot = sum(a[1] for a in agg.values())
for k, (c, s) in agg.items(): print(f"  {c:5d} x {s/c/1e3:8.2f} us = {s/64e3:8.2f} us/batch  {k}")
print(f"  total {tot/64e3:.2f} us/batch over 64 batches")
PY
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
