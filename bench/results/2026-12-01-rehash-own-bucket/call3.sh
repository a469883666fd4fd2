#!/usr/bin/env bash
# Session 34, call 3 (a fresh machine; the final tree: own-bucket rehash, pools advised to take
# 2 MiB pages, gpu_bench --pool-dir): host-mapped tables with the pool on /dev/shm (huge=never)
# against a tmpfs mounted huge=always and one mounted huge=advise (where only the pool's
# MADV_HUGEPAGE asks for them): LOAD from a small table, presized LOAD, YCSB with the complete
# cache at 2^16 and without a cache at 2^20.
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
mkdir -p /tmp/thp /tmp/thpa
mount -t tmpfs -o huge=always,size=24G tmpfs /tmp/thp && mount -t tmpfs -o huge=advise,size=24G tmpfs /tmp/thpa || echo "mount failed"
bin=$B/bench/gpu_bench
ycsb="--sections gpu-batches --placement mapped --ycsb-records 16777216 --ycsb-key-width 32 --ycsb-value-width 32"
small="$ycsb --ycsb-batch 1048576 --capacity 83886 --workloads load"
presized="$ycsb --ycsb-batch 1048576 --capacity 16777216 --workloads load"
m16="$ycsb --capacity 16777216 --cache lfu --cache-fraction 1.0 --workloads load,b,a,b,a --ycsb-batch 65536"
m20="$ycsb --capacity 16777216 --workloads load,c,b,a --ycsb-batch 1048576"
run() { local name=$1; shift; local s=$(date +%s)
  [ $(( s - t0 )) -gt 560 ] && { echo "skip $name"; return; }
  timeout 45 "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1; echo "$name rc=$? ($(( $(date +%s) - s )) s)"
  grep -h "FilePmdMapped\|ShmemPmdMapped" /proc/meminfo >> $out/r/$name.log; }
run small_shm $bin $small
run small_thp $bin $small --pool-dir /tmp/thp
run small_thpa $bin $small --pool-dir /tmp/thpa
run small_thp_res $bin $small --pool-dir /tmp/thp --reserve-pool-bytes 3221225472
run presized_shm $bin $presized
run presized_thp $bin $presized --pool-dir /tmp/thp
run m16_shm $bin $m16
run m16_thp $bin $m16 --pool-dir /tmp/thp
run m20_shm $bin $m20
run m20_thp $bin $m20 --pool-dir /tmp/thp
for f in $out/r/*.json; do [ -f "$f" ] && python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(f"{name:14s}", " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.1f}/{r["ops_per_second"]/1e6:.1f}' for r in d["results"]))
PY
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
