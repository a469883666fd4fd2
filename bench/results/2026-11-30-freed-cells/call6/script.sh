#!/usr/bin/env bash
# Session 22, call 6: the branch next/known-line's gpu_bench (built on the dev VM, carried), YCSB
# host-mapped 2^16 and 2^20 with the complete cache, twice each; compare with call 3 (main).
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
B=$root/peers-local/bin/gpu_bench_kl
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --workloads load,c,b,a,b,a --cache lfu --cache-fraction 1.0"
t0=$(date +%s)
for r in kl_m16 kl_m20 kl_m16b kl_m20b; do
  (( $(date +%s) - t0 > 150 )) && break
  b=65536; [[ $r == *m20* ]] && b=1048576
  s=$(date +%s); timeout 45 $B $mapped --ycsb-batch $b --json $out/r/$r.json > $out/r/$r.log 2>&1; echo "$r rc=$? $(( $(date +%s) - s )) s"
done
for f in $out/r/*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
print(sys.argv[1].split('/')[-1][:-5], " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}(nf {r["not_found"]},bad {r["bad_values"]})' for r in d["results"]))
PY
done
