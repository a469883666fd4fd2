#!/usr/bin/env bash
# Session 35, call 4 (the warm machine of call 3, its CPU-only server build): the quick matrix of
# scripts/server_bench.sh with the CPU index (one and four requests in flight) on the final tree.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
t0=$(date +%s)
B=$root/build-device/cpu
[ -x $B/gphash-server ] || { echo "no build here (a fresh machine)"; exit 1; }
for d in 1 4; do
  GPHASH_SERVER=$B/gphash-server LOADGEN=$B/gphash-server-loadgen ENGINE=cpu SERVER_THREADS=8 LOADGEN_THREADS=8 CONNECTIONS=128 \
    DEPTH=$d QUICK=1 REPEAT=2 OUT=$out/r/quick_cpu_d$d.json scripts/server_bench.sh > $out/r/quick_cpu_d$d.log 2>&1
  echo "depth $d rc=$? ($(( $(date +%s) - t0 )) s)"
done
for d in 1 4; do python3 - $out/r/quick_cpu_d$d.json $d <<'PY'
import json, sys, statistics
runs = json.load(open(sys.argv[1]))["runs"]
for cfg in dict.fromkeys(r["config"] for r in runs):
    m = [r["load"]["ops_per_s"] for r in runs if r["config"] == cfg and r["server"] == "memcached"]
    g = [r["load"]["ops_per_s"] for r in runs if r["config"] == cfg and r["server"] == "gphash"]
    p = lambda s: statistics.median(r["load"]["p99_us"] for r in runs if r["config"] == cfg and r["server"] == s)
    print(f"depth {sys.argv[2]} {cfg:34s} memcached {statistics.median(m)/1e3:7.0f}K gphash {statistics.median(g)/1e3:7.0f}K ratio {statistics.median(g)/statistics.median(m):.2f} p99 {p('gphash'):.0f}/{p('memcached'):.0f}")
PY
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
