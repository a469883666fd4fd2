#!/usr/bin/env bash
# Session 35, call 1 (a fresh machine): Release build; LOAD from a small table and presized, and
# YCSB A at 2^20, with the GPU engine's growth ahead of a batch on and off (GPHASH_NO_GROW_AHEAD,
# a temporary switch in this tree), alternating, pools on /dev/shm and on a tmpfs with 2 MiB pages.
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
mkdir -p /tmp/thp; mount -t tmpfs -o huge=always,size=24G tmpfs /tmp/thp || echo "mount failed"
bin=$B/bench/gpu_bench
ycsb="--sections gpu-batches --placement mapped --ycsb-records 16777216 --ycsb-key-width 32 --ycsb-value-width 32"
small="$ycsb --ycsb-batch 1048576 --capacity 83886 --workloads load"
presized="$ycsb --ycsb-batch 1048576 --capacity 16777216 --workloads load,a"
run() { local name=$1; shift; local s=$(date +%s)
  [ $(( s - t0 )) -gt 570 ] && { echo "skip $name"; return; }
  timeout 40 "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1; echo "$name rc=$? ($(( $(date +%s) - s )) s)"; }
run small_thp_on1 $bin $small --pool-dir /tmp/thp
GPHASH_NO_GROW_AHEAD=1 run small_thp_off1 $bin $small --pool-dir /tmp/thp
run small_shm_on1 $bin $small
GPHASH_NO_GROW_AHEAD=1 run small_shm_off1 $bin $small
GPHASH_NO_GROW_AHEAD=1 run small_thp_off2 $bin $small --pool-dir /tmp/thp
run small_thp_on2 $bin $small --pool-dir /tmp/thp
GPHASH_NO_GROW_AHEAD=1 run presized_thp_off1 $bin $presized --pool-dir /tmp/thp
run presized_thp_on1 $bin $presized --pool-dir /tmp/thp
for f in $out/r/*.json; do [ -f "$f" ] && python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(f"{name:18s}", " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.1f}/{r["ops_per_second"]/1e6:.1f}[rs{r.get("resize_seconds",0):.3f} hp{r.get("heap_grow_seconds",0):.3f} sl{r.get("slow_seconds",0):.3f}]' + ('' if r["not_found"]==0 and r["bad_values"]==0 else f'(nf {r["not_found"]},bad {r["bad_values"]})') for r in d["results"]))
PY
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
