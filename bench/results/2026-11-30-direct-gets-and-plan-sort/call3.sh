#!/usr/bin/env bash
# Session 30, call 3: where a 2^16 host-mapped batch's plan goes. ncu kernel durations of YCSB B's
# batches (host-mapped, 32-byte keys and values, complete cache), cub's sort and the cluster sort.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device/main
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON -DGPHASH_TESTS=OFF "${cmake_args[@]}" && cmake --build $B -j 16 --target gpu_bench ) > $out/r/build.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
bin=$B/bench/gpu_bench
args="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0 --workloads load,c,b,a,b --operations 4194304 --ycsb-batch 65536"
for v in cub small; do
  e=X=1; [ $v = cub ] && e=GPHASH_DIAG_CUB_SORT=1
  env $e timeout 60 $bin $args > $out/r/plain_$v.log 2>&1; echo "plain_$v rc=$?"; grep "gpu-batches" $out/r/plain_$v.log | head -5 | cut -c1-200
  env $e timeout 200 ncu --clock-control none --cache-control none --profile-from-start off --metrics gpu__time_duration.sum --csv --print-units base \
      $bin $args --profile-workload 4 > $out/r/ncu_$v.csv 2> $out/r/ncu_$v.err; echo "ncu_$v rc=$? $(( $(date +%s) - t0 )) s"
  python3 - $out/r/ncu_$v.csv <<'PY'
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
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
