#!/usr/bin/env bash
# Session 22, call 1: fence experiment (GPHASH_AB_FENCE bits: 1 no durability fence in batch_kernel,
# 2 block-level cell/publish fences, 4 no trailing fence in WarpOps::write_value). gpu_bench only.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device
( cmake -S . -B $B/main -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B/main -j 16 --target gpu_bench ) > $out/r/build-main.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build-main.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
NEW=$B/main/bench/gpu_bench
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --workloads load,c,b,a,b,a --cache lfu --cache-fraction 1.0"
run() {  # run NAME MODE ARGS...
  local name=$1 mode=$2; shift 2
  local s=$(date +%s)
  GPHASH_AB_FENCE=$mode timeout 90 $NEW "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name ($(( $(date +%s) - s )) s) rc=$?"
}
run m16_f0 0 $mapped --ycsb-batch 65536
run m16_f7 7 $mapped --ycsb-batch 65536
run m16_f1 1 $mapped --ycsb-batch 65536
run m16_f5 5 $mapped --ycsb-batch 65536
run m16_f3 3 $mapped --ycsb-batch 65536
run m20_f0 0 $mapped --ycsb-batch 1048576
run m20_f7 7 $mapped --ycsb-batch 1048576
left=$(( 560 - ($(date +%s) - t0) ))
(( left > 40 )) && run m16_f0b 0 $mapped --ycsb-batch 65536
left=$(( 560 - ($(date +%s) - t0) ))
(( left > 40 )) && run m16_f7b 7 $mapped --ycsb-batch 65536
tar czf $out/r.tgz -C $out r
echo "==== summary"
for f in $out/r/*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(name, " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}(p50 {r["batch_p50_seconds"]*1e3:.2f}ms,nf {r["not_found"]},bad {r["bad_values"]})' for r in d["results"]))
PY
done
