#!/usr/bin/env bash
# Session 37, call 2: the phase's fill with fewer blocks (GPHASH_CACHE_FILL_BLOCKS, a temporary
# switch: 0 = one per SM, as before): build, the cache tests, then YCSB C and A at 2^16 (LFU 20%,
# Zipf 0.99) with 33, 0, 16 and 8 fill blocks while the call has time.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
export t0=$(date +%s)
B=$root/build-device/main
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B -j 16 --target gpu_bench gpu_cache_test ) > $out/r/build.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
timeout 60 $B/tests/gpu_cache_test > $out/r/gpu_cache_test.log 2>&1; echo "gpu_cache_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' $out/r/gpu_cache_test.log | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)"
bash bench/results/2026-12-02-cache-loading-phases/runs.sh $B $out/r 565 lfu:0.2:zipfian:65536:0:33:load,c,a lfu:0.2:zipfian:65536:0:0:load,c,a lfu:0.2:zipfian:65536:0:16:load,c,a lfu:0.2:zipfian:65536:0:8:load,c,a
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
