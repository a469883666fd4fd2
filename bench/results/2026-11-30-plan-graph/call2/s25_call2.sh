#!/usr/bin/env bash
# Session 25, call 2 (branch next/s25-experiments + bit 64: put_value_in split into bytes (loads
# before stores) and a reference stored after the commit barrier). Combinations at m16/m20, then
# ncu source counters of long_run_kernel and batch_kernel for A at 2^16 with everything on.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device
( cmake -S . -B $B/main -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON -DGPHASH_TESTS=OFF -DCMAKE_CUDA_FLAGS=-lineinfo "${cmake_args[@]}" && cmake --build $B/main -j 16 --target gpu_bench ) > $out/r/build-main.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build-main.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
NEW=$B/main/bench/gpu_bench
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0"
run() {  # run NAME AB ARGS...
  local name=$1 ab=$2; shift 2
  local s=$(date +%s)
  GPHASH_AB_LONG=$ab timeout 60 $NEW "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name ($(( $(date +%s) - s )) s) rc=$?"
}
for rep in 1 2; do
  for ab in 8 24 56 72 120 122; do run m16_ab${ab}_$rep $ab $mapped --workloads load,c,b,a,b,a --ycsb-batch 65536; done
done
for ab in 8 120; do run m20_ab${ab} $ab $mapped --workloads load,c,b,a,b,a --ycsb-batch 1048576; done
tar czf $out/r.tgz -C $out r
echo "runs done at $(( $(date +%s) - t0 )) s"
NCU="ncu --clock-control none --cache-control none --profile-from-start off"
for k in long_run_kernel batch_kernel; do
  [ $(( $(date +%s) - t0 )) -lt 480 ] || break
  t1=$(date +%s)
  GPHASH_AB_LONG=120 timeout 60 $NCU --section SourceCounters --section WarpStateStats --section LaunchStats --import-source yes --kernel-name regex:$k --launch-skip 20 --launch-count 1 -o $out/r/$k $NEW $mapped --workloads load,a,a --operations 4194304 --profile-workload 2 --ycsb-batch 65536 > $out/r/ncu_$k.log 2>&1; echo "ncu $k rc=$? $(( $(date +%s) - t1 )) s"
  ncu -i $out/r/$k.ncu-rep --page source --csv --print-source cuda,sass > $out/r/${k}_src.csv 2> $out/r/${k}_src.err || ncu -i $out/r/$k.ncu-rep --page source --csv --print-source sass > $out/r/${k}_src.csv 2>> $out/r/${k}_src.err
  echo "$k csv $(wc -l < $out/r/${k}_src.csv) lines"
  ncu -i $out/r/$k.ncu-rep --page details --print-details all > $out/r/${k}_details.txt 2>&1
  rm -f $out/r/$k.ncu-rep; gzip -f $out/r/${k}_src.csv
done
tar czf $out/r.tgz -C $out r
echo "==== summary"
for f in $out/r/m*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(name, " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}' + ('' if r["not_found"]==0 and r["bad_values"]==0 else f'(nf {r["not_found"]},bad {r["bad_values"]})') for r in d["results"]))
PY
done
grep -h "ab_long" $out/r/m16_ab*_1.log | awk 'NR%2==0' | cut -c1-150 | head -30
