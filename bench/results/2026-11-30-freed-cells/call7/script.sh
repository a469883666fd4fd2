#!/usr/bin/env bash
# Session 22, call 7: main against next/known-line on one machine, alternating (LOAD and A at 2^16).
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
ls -la peers-local/bin/
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --workloads load,c,b,a --cache lfu --cache-fraction 1.0 --ycsb-batch 65536"
t0=$(date +%s)
for r in main1 kl1 main2 kl2 main3 kl3; do
  (( $(date +%s) - t0 > 110 )) && break
  bin=peers-local/bin/gpu_bench_${r%[0-9]}
  [[ -x $bin ]] || { echo "$r: no $bin"; continue; }
  s=$(date +%s); timeout 30 $bin $mapped --json $out/r/$r.json > $out/r/$r.log 2>&1; echo "$r rc=$? $(( $(date +%s) - s )) s"
done
for f in $out/r/*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
print(sys.argv[1].split('/')[-1][:-5], " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}(nf {r["not_found"]},bad {r["bad_values"]})' for r in d["results"]))
PY
done
