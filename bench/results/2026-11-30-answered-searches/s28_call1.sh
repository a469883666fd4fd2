#!/usr/bin/env bash
# Session 28, call 1: gphash-server with the GPU index, branch next/s28-answered-searches (working
# tree) against main (peers-local/before.tgz = git archive main), same call, alternating:
# server_bench ENGINE=gpu QUICK=1 REPEAT=2 at DEPTH=4, then DEPTH=1, 8 threads, 128 connections.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
mkdir -p /tmp/before && tar xzf peers-local/before.tgz -C /tmp/before
srv="-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF"
( cmake -S . -B build-device/after -G Ninja $srv "${cmake_args[@]}" && cmake --build build-device/after -j 8 --target gphash-server gphash-server-loadgen ) > $out/r/build-after.log 2>&1 & p1=$!
( cmake -S /tmp/before -B build-device/before -G Ninja $srv "${cmake_args[@]}" && cmake --build build-device/before -j 8 --target gphash-server ) > $out/r/build-before.log 2>&1 & p2=$!
wait $p1 || { grep -B2 -A10 -m5 error $out/r/build-after.log | head -40; exit 1; }
wait $p2 || { tail -30 $out/r/build-before.log; exit 1; }
echo "builds: $(( $(date +%s) - t0 )) s"
for depth in 4 1; do
  for which in after before; do
    left=$(( 570 - ($(date +%s) - t0) )); [ $left -gt 60 ] || { echo "d$depth $which skipped"; continue; }
    t1=$(date +%s)
    env QUICK=1 REPEAT=2 SERVER_THREADS=8 LOADGEN_THREADS=8 CONNECTIONS=128 DEPTH=$depth RUN_SECONDS=3 ENGINE=gpu \
      GPHASH_SERVER=$root/build-device/$which/gphash-server LOADGEN=$root/build-device/after/gphash-server-loadgen \
      OUT=$out/r/d${depth}_$which.json timeout $left scripts/server_bench.sh > $out/r/d${depth}_$which.log 2>&1
    echo "d$depth $which: rc=$? ($(( $(date +%s) - t1 )) s)"
  done
done
tar czf $out/r.tgz -C $out r
for f in $out/r/d*.log; do echo "== $f"; sed -n '/ns per key/,$p' $f; done
