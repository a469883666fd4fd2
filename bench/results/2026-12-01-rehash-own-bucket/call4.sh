#!/usr/bin/env bash
# Session 34, call 4 (the warm machine of call 3, its build and mounts): the GPU suite and the GPU
# kill test on the final tree; call 3's comparisons again, in the other order.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device/main
[ -x $B/bench/gpu_bench ] || { echo "no build here (a fresh machine)"; exit 1; }
(cd $B && ctest -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 300 > $out/r/gpu_suite.log 2>&1); echo "gpu suite rc=$? $(grep -E 'tests passed|tests failed' $out/r/gpu_suite.log) ($(( $(date +%s) - t0 )) s)"
grep -A20 "tests failed" $out/r/gpu_suite.log | head -20
GPHASH_CRASH_ENGINE=gpu GPHASH_KILLS=60 GPHASH_KILL_SECONDS=30 $B/tests/crash/kill_test > $out/r/gpu_kill_test.log 2>&1; echo "kill test rc=$? $(grep -E 'kills|PASSED|FAILED' $out/r/gpu_kill_test.log | head -3 | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)"
mountpoint -q /tmp/thp || { mkdir -p /tmp/thp /tmp/thpa; mount -t tmpfs -o huge=always,size=24G tmpfs /tmp/thp; mount -t tmpfs -o huge=advise,size=24G tmpfs /tmp/thpa; }
bin=$B/bench/gpu_bench
ycsb="--sections gpu-batches --placement mapped --ycsb-records 16777216 --ycsb-key-width 32 --ycsb-value-width 32"
small="$ycsb --ycsb-batch 1048576 --capacity 83886 --workloads load"
presized="$ycsb --ycsb-batch 1048576 --capacity 16777216 --workloads load"
m16="$ycsb --capacity 16777216 --cache lfu --cache-fraction 1.0 --workloads load,b,a,b,a --ycsb-batch 65536"
m20="$ycsb --capacity 16777216 --workloads load,c,b,a --ycsb-batch 1048576"
run() { local name=$1; shift; local s=$(date +%s)
  [ $(( s - t0 )) -gt 560 ] && { echo "skip $name"; return; }
  timeout 45 "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1; echo "$name rc=$? ($(( $(date +%s) - s )) s)"; }
run small_thp_res2 $bin $small --pool-dir /tmp/thp --reserve-pool-bytes 3221225472
run small_thpa2 $bin $small --pool-dir /tmp/thpa
run small_thp2 $bin $small --pool-dir /tmp/thp
run small_shm2 $bin $small
run small_shm_res2 $bin $small --reserve-pool-bytes 3221225472
run m20_thp2 $bin $m20 --pool-dir /tmp/thp
run m20_shm2 $bin $m20
run m16_thp2 $bin $m16 --pool-dir /tmp/thp
run m16_shm2 $bin $m16
for f in $out/r/*.json; do [ -f "$f" ] && python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(f"{name:14s}", " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.1f}/{r["ops_per_second"]/1e6:.1f}' for r in d["results"]))
PY
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
