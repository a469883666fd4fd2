#!/usr/bin/env bash
# Session 34, call 1: full build; LOAD from a small table (8 resizes) with the rehash filling each
# item's own bucket at the new top level, against the least-loaded rule (GPHASH_REHASH_SPREAD=1, a
# temporary switch), with and without a 3 GiB pool reservation; a trace of each growth's phases
# (GPHASH_GROWTH_TRACE, temporary). Also what this machine offers for huge pages.
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
{ id -u; grep -i huge /proc/meminfo; cat /sys/kernel/mm/transparent_hugepage/shmem_enabled /sys/kernel/mm/transparent_hugepage/enabled; mount | grep -E "huge|shm|tmpfs"; nproc; free -g; } > $out/r/machine.log 2>&1
bin=$B/bench/gpu_bench
small="--sections gpu-batches --placement mapped --ycsb-records 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --ycsb-batch 1048576 --capacity 83886 --workloads load"
run() { local name=$1; shift; local s=$(date +%s)
  [ $(( s - t0 )) -gt 555 ] && { echo "skip $name"; return; }
  timeout 40 env GPHASH_GROWTH_TRACE=1 "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1; echo "$name rc=$? ($(( $(date +%s) - s )) s)"; }
run own1 $bin $small
run spread1 env GPHASH_REHASH_SPREAD=1 $bin $small
run own_res1 $bin $small --reserve-pool-bytes 3221225472
run spread_res1 env GPHASH_REHASH_SPREAD=1 $bin $small --reserve-pool-bytes 3221225472
for f in $out/r/*.log; do grep -H "gpu-batches (gpu mapped): load" $f | head -1 | sed 's|.*/r/||'; done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
