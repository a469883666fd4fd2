#!/usr/bin/env bash
# Session 30, call 5: scripts/server_bench.sh QUICK at one and four requests in flight, CPU engine,
# main with the direct path for rounds of gets (d3427d3), 16 cores: the README's server figures.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
t0=$(date +%s)
B=$root/build-device/cpu
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPHASH_CUDA=OFF -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build $B -j 16 --target gphash-server gphash-server-loadgen ) > $out/r/build.log 2>&1 || { tail -30 $out/r/build.log; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
export GPHASH_SERVER=$B/gphash-server LOADGEN=$B/gphash-server-loadgen MEMCACHED=/tmp/gphash-deps/usr/bin/memcached
export SERVER_THREADS=8 LOADGEN_THREADS=8 CONNECTIONS=128 RUN_SECONDS=3 QUICK=1 REPEAT=2
for d in 1 4; do
  DEPTH=$d OUT=$out/r/depth$d.json timeout 260 bash scripts/server_bench.sh > $out/r/depth$d.log 2>&1; echo "depth $d rc=$? $(( $(date +%s) - t0 )) s"
  grep -v "^ *$" $out/r/depth$d.log | tail -14
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
