#!/usr/bin/env bash
# Session 36, call 3 (a fresh machine): a Release build of gphash-server with the GPU engine, then
# the operations test with the GPU index (its index_grows case starts the index at 2^12 items and
# grows it under a running server: not run on a GPU before).
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device/gpu
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_BENCH=OFF "${cmake_args[@]}" && timeout 540 cmake --build $B -j 16 --target gphash-server gphash-server-loadgen ) > $out/r/build.log 2>&1
echo "build rc=$? ($(( $(date +%s) - t0 )) s)"; tail -2 $out/r/build.log
left=$(( 585 - ($(date +%s) - t0) ))
if [ -x $B/gphash-server ] && [ $left -gt 15 ]; then
  GPHASH_SERVER=$B/gphash-server GPHASH_SERVER_ARGS="--engine gpu" timeout $left python3 tests/server/operations_test.py > $out/r/operations_gpu.log 2>&1
  echo "operations_test --engine gpu rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "FAIL|grew|passed" $out/r/operations_gpu.log | head -12
fi
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
