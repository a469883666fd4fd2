#!/usr/bin/env bash
# Session 27, call 4: gphash-server beside memcached -t 8 at 4 requests in flight per connection
# (128 connections: 512 in flight), GPU index then CPU engine; scripts/server_bench.sh QUICK=1.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device/srv
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build $B -j 16 --target gphash-server gphash-server-loadgen ) > $out/r/build.log 2>&1 || { tail -30 $out/r/build.log; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
common="QUICK=1 REPEAT=1 SERVER_THREADS=8 LOADGEN_THREADS=8 CONNECTIONS=128 DEPTH=4 RUN_SECONDS=4 GPHASH_SERVER=$B/gphash-server LOADGEN=$B/gphash-server-loadgen"
for engine in gpu cpu; do
  t1=$(date +%s)
  left=$(( 395 - (t1 - t0) )); [ $left -gt 20 ] || { echo "$engine skipped"; continue; }
  env $common ENGINE=$engine OUT=$out/r/server_d4_$engine.json timeout $left scripts/server_bench.sh > $out/r/server_d4_$engine.log 2>&1
  echo "server $engine: rc=$? ($(( $(date +%s) - t1 )) s)"
done
tar czf $out/r.tgz -C $out r
for engine in gpu cpu; do echo "== $engine"; sed -n '/ns per key/,$p' $out/r/server_d4_$engine.log; done
