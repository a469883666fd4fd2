#!/usr/bin/env bash
# Session 24, call 1 (branch next/long-runs-order): why host-mapped A at 2^16 lost with long runs
# beside. GPHASH_AB_LONG: 8 = as main (+ timing), 10 = beside at 2^16 high priority first,
# 14 = beside launched after the batch kernel at default priority, 9 = after everywhere,
# 24 = as main + the plan as one CUDA graph (bit 16).
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
NEW=$B/main/bench/gpu_bench
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0 --workloads load,c,b,a,b,a"
hbm="--sections gpu-batches --placement gpu-memory --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 8 --ycsb-value-width 8 --workloads load,c,b,a"
run() {  # run NAME AB ARGS...
  local name=$1 ab=$2; shift 2
  local s=$(date +%s)
  GPHASH_AB_LONG=$ab timeout 60 $NEW "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name ($(( $(date +%s) - s )) s) rc=$?"
}
for rep in 1 2; do
  for ab in 8 10 14 9 24; do run m16_ab${ab}_$rep $ab $mapped --ycsb-batch 65536; done
done
for ab in 8 14 24; do run m20_ab${ab} $ab $mapped --ycsb-batch 1048576; done
for ab in 8 14 24; do run h16_ab${ab} $ab $hbm --ycsb-batch 65536; done
tar czf $out/r.tgz -C $out r
echo "==== summary"
for f in $out/r/[mh]*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(name, " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}[p{r["plan_seconds"]*1e3:.0f}k{r["kernel_seconds"]*1e3:.0f}]' + ('' if r["not_found"]==0 and r["bad_values"]==0 else f'(nf {r["not_found"]},bad {r["bad_values"]})') for r in d["results"]))
PY
done
grep -h "ab_long" $out/r/m16_ab*_1.log | head -60
