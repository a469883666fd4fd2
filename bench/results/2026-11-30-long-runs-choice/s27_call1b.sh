#!/usr/bin/env bash
# Session 27, call 1: one build of next/s27-diag (branch next/s27-long-runs-choice + env knobs):
# GPHASH_DIAG_WAY 0 after / 1 beside / unset chooser; GPHASH_DIAG_MIN 1 = beside takes runs that
# cover a window (main), 512 = runs of 512+ (c334198). Host-mapped m16, m20; GPU memory g20.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device
( cmake -S . -B $B/main -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON -DGPHASH_TESTS=OFF "${cmake_args[@]}" && cmake --build $B/main -j 16 --target gpu_bench ) > $out/r/build-main.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build-main.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0 --workloads load,c,b,a,b,a"
gpumem="--sections gpu-batches --placement gpu-memory --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 8 --ycsb-value-width 8 --workloads load,c,b,a,b,a"
bin=$B/main/bench/gpu_bench
run() {  # run NAME ENV... -- ARGS...
  local name=$1; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  [ $(( $(date +%s) - t0 )) -lt 560 ] || { echo "$name skipped"; return; }
  local s=$(date +%s)
  env "${envs[@]}" timeout 40 $bin "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name rc=$? ($(( $(date +%s) - s )) s) $(grep -c DIAG $out/r/$name.log) switches"
}
for rep in 1 2 3; do
  run after_m16_$rep GPHASH_DIAG_WAY=0 -- $mapped --ycsb-batch 65536
  run b512_m16_$rep GPHASH_DIAG_WAY=1 GPHASH_DIAG_MIN=512 -- $mapped --ycsb-batch 65536
  run choose_m16_$rep X=1 -- $mapped --ycsb-batch 65536
  [ $rep = 1 ] && run bwin_m16_$rep GPHASH_DIAG_WAY=1 GPHASH_DIAG_MIN=1 -- $mapped --ycsb-batch 65536
  [ $rep = 3 ] || { run win_m20_$rep GPHASH_DIAG_MIN=1 -- $mapped --ycsb-batch 1048576; run b512_m20_$rep GPHASH_DIAG_MIN=512 -- $mapped --ycsb-batch 1048576; }
done
run win_g20 GPHASH_DIAG_MIN=1 -- $gpumem --ycsb-batch 1048576
run b512_g20 GPHASH_DIAG_MIN=512 -- $gpumem --ycsb-batch 1048576
tar czf $out/r.tgz -C $out r
echo "==== summary"
for f in $out/r/*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(name, " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}' + ('' if r["not_found"]==0 and r["bad_values"]==0 else f'(nf {r["not_found"]},bad {r["bad_values"]})') for r in d["results"]))
PY
done
grep -h DIAG $out/r/choose_m16_1.log | head -20
