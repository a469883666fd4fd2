#!/usr/bin/env bash
# Session 24, call 4: gphash-server before (0855986) and after the user-space changes (54b248b),
# CPU engine, 8 server threads, 8 load-generator threads, 128 connections, beside memcached -t 8.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
t0=$(date +%s)
mkdir -p /tmp/before && tar xzf peers-local/before.tgz -C /tmp/before
( cmake -S . -B build-device/srv -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPHASH_CUDA=OFF -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build build-device/srv -j 8 --target gphash-server gphash-server-loadgen ) > $out/r/build-after.log 2>&1 & p1=$!
( cd /tmp/before && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPHASH_CUDA=OFF -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build build -j 8 --target gphash-server ) > $out/r/build-before.log 2>&1 & p2=$!
wait $p1 || { tail -30 $out/r/build-after.log; exit 1; }
wait $p2 || { tail -30 $out/r/build-before.log; exit 1; }
echo "builds: $(( $(date +%s) - t0 )) s"
common="QUICK=1 REPEAT=2 SERVER_THREADS=8 LOADGEN_THREADS=8 CONNECTIONS=128 RUN_SECONDS=4 LOADGEN=$root/build-device/srv/gphash-server-loadgen"
for which in after before; do
  bin=$root/build-device/srv/gphash-server; [[ $which == before ]] && bin=/tmp/before/build/gphash-server
  t1=$(date +%s)
  env $common GPHASH_SERVER=$bin OUT=$out/r/server_$which.json scripts/server_bench.sh > $out/r/server_$which.log 2>&1
  echo "$which: rc=$? ($(( $(date +%s) - t1 )) s)"
done
tar czf $out/r.tgz -C $out r
for which in after before; do echo "== $which"; sed -n '/medians/,$p' $out/r/server_$which.log; done
