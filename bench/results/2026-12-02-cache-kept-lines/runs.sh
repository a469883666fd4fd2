#!/usr/bin/env bash
# runs.sh BUILD OUTDIR DEADLINE_S POLICY:FRACTION:DISTRIBUTION:BATCH[:RELOAD[:KEEP_BONUS[:WORKLOADS]]]...:
# one gpu_bench run each (host-mapped, 16.8 M items, 32-byte keys and values; LOAD then C, B, A
# twice unless WORKLOADS; RELOAD operations between loading phases, default 2 M; KEEP_BONUS the LFU
# bonus of a bucket cached now, GPHASH_CACHE_KEEP_BONUS, a switch of the measured tree only, default
# 32, 0 = none), skipped once DEADLINE_S seconds have passed since the call began ($t0 from the
# caller's environment, or now); then a line per workload: device rate, lines loaded from the pool,
# and beside loading phases against the other batches.
B=$1; out=$2; deadline=$3; shift 3
start=${t0:-$(date +%s)}
for spec in "$@"; do
  IFS=: read -r policy fraction dist batch reload keep workloads <<<"$spec"
  name=${policy}${fraction}_${dist}_${batch}_r${reload:-0}_k${keep:-32}
  [ $(( $(date +%s) - start )) -gt $deadline ] && { echo "skip $name"; continue; }
  s=$(date +%s)
  GPHASH_CACHE_KEEP_BONUS=${keep:-32} timeout 90 $B/bench/gpu_bench --sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 \
    --ycsb-key-width 32 --ycsb-value-width 32 --cache $policy --cache-fraction $fraction --distribution $dist \
    --cache-reload ${reload:-0} --workloads ${workloads:-load,c,b,a,c,b,a} --ycsb-batch $batch --json $out/$name.json > $out/$name.log 2>&1
  echo "$name rc=$? ($(( $(date +%s) - s )) s)"
  python3 - $out/$name.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["gpu_batches"]
for r in d["results"]:
    lo, st = r.get("loading_device_ops_per_second", 0) / 1e6, r.get("steady_device_ops_per_second", 0) / 1e6
    ratio = f"{100 * lo / st:.0f}%" if lo and st else "-"
    print(f'  {r["workload"]:5s} device {r.get("device_ops_per_second", 0) / 1e6:7.1f} e2e {r["ops_per_second"] / 1e6:7.1f}'
          f'  hit {100 * (r.get("cache_hit_rate") or 0):4.1f}%  loaded {r.get("cache_lines_loaded", 0):9d}'
          f'  beside {lo:7.1f} ({r.get("loading_operations", 0)} ops)  others {st:7.1f}  {ratio}'
          f'  not found {r["not_found"]} bad {r["bad_values"]}')
PY
done
