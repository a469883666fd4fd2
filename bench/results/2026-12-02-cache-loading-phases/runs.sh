#!/usr/bin/env bash
# runs.sh BUILD OUTDIR DEADLINE_S POLICY:FRACTION:DISTRIBUTION:BATCH[:RELOAD[:FILL_BLOCKS[:WORKLOADS]]]...:
# one gpu_bench run each (host-mapped, 16.8 M items, 32-byte keys and values; LOAD then C, B, A
# twice unless WORKLOADS; RELOAD operations between loading phases, default 2 M; FILL_BLOCKS the
# phase's fill blocks, GPHASH_CACHE_FILL_BLOCKS, default one per SM), skipped once DEADLINE_S
# seconds have passed since the call began ($t0 from the caller's environment, or now); then a line
# per workload: device rate, and beside loading phases against the other batches.
B=$1; out=$2; deadline=$3; shift 3
start=${t0:-$(date +%s)}
for spec in "$@"; do
  IFS=: read -r policy fraction dist batch reload fill workloads <<<"$spec"
  name=${policy}${fraction}_${dist}_${batch}_r${reload:-0}_f${fill:-0}
  [ $(( $(date +%s) - start )) -gt $deadline ] && { echo "skip $name"; continue; }
  s=$(date +%s)
  GPHASH_CACHE_FILL_BLOCKS=${fill:-0} timeout 60 $B/bench/gpu_bench --sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 \
    --ycsb-key-width 32 --ycsb-value-width 32 --cache $policy --cache-fraction $fraction --distribution $dist \
    --cache-reload ${reload:-0} --workloads ${workloads:-load,c,b,a,c,b,a} --ycsb-batch $batch --json $out/$name.json > $out/$name.log 2>&1
  echo "$name rc=$? ($(( $(date +%s) - s )) s)"
  python3 - $out/$name.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["gpu_batches"]
for r in d["results"]:
    lo, st = r.get("loading_device_ops_per_second", 0) / 1e6, r.get("steady_device_ops_per_second", 0) / 1e6
    ratio = f"{100 * lo / st:.0f}%" if lo and st else "-"
    print(f'  {r["workload"]:5s} device {r.get("device_ops_per_second", 0) / 1e6:8.1f} end to end {r["ops_per_second"] / 1e6:8.1f}'
          f'  hit {100 * (r.get("cache_hit_rate") or 0):5.1f}%  beside loading {lo:8.1f} ({r.get("loading_operations", 0)} ops)'
          f'  others {st:8.1f}  {ratio}  not found {r["not_found"]} bad {r["bad_values"]}')
PY
done
