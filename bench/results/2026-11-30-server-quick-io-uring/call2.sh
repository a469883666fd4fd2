#!/usr/bin/env bash
# Session 32, call 2: the GPU suite (liburing now in .deps: the embedding file tier builds with
# io_uring), then scripts/server_bench.sh QUICK REPEAT=2 with the CPU engine at depth 1 and 4 and
# the GPU index at depth 1 and 4 (io_uring default), 16 cores, 8 threads, 128 connections.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device/main
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B -j 16 ) > $out/r/build.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"; grep -i "uring" $B/CMakeCache.txt | head -3
(cd $B && ctest -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 300 > $out/r/gpu_suite.log 2>&1); echo "gpu suite rc=$? $(grep -E 'tests passed|tests failed' $out/r/gpu_suite.log) ($(( $(date +%s) - t0 )) s)"
grep -A20 "tests failed" $out/r/gpu_suite.log | head -20
grep -i "embedding\|tier" $out/r/gpu_suite.log | head -8
export GPHASH_SERVER=$B/gphash-server LOADGEN=$B/gphash-server-loadgen MEMCACHED=/tmp/gphash-deps/usr/bin/memcached
export SERVER_THREADS=8 LOADGEN_THREADS=8 CONNECTIONS=128 RUN_SECONDS=3 QUICK=1 REPEAT=2
for e in cpu gpu; do for d in 1 4; do
  left=$(( 590 - ($(date +%s) - t0) ))
  [ $left -lt 60 ] && { echo "skip $e depth $d"; continue; }
  ENGINE=$e DEPTH=$d OUT=$out/r/${e}_depth$d.json timeout $left bash scripts/server_bench.sh > $out/r/${e}_depth$d.log 2>&1; echo "$e depth $d rc=$? $(( $(date +%s) - t0 )) s"
  grep -v "^ *$" $out/r/${e}_depth$d.log | tail -12
done; done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
