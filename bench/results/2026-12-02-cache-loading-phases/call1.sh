#!/usr/bin/env bash
# Session 37, call 1: BktCache's throughput beside its loading phases against the other batches
# (TableInfo::last_batch_cache_loading, new): build gpu_bench and gpu_cache_test, run the cache
# tests, then YCSB on a host-mapped table (16.8 M items, 32-byte keys and values, Zipf 0.99) with
# LFU at 20% of the buckets (a phase every 2 M operations, the default), batches of 2^20 and 2^16.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device/main
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B -j 16 --target gpu_bench gpu_cache_test ) > $out/r/build.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
timeout 200 $B/tests/gpu_cache_test > $out/r/gpu_cache_test.log 2>&1; echo "gpu_cache_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' $out/r/gpu_cache_test.log | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)"
grep -B3 -A8 "Failure" $out/r/gpu_cache_test.log | head -30
bash bench/results/2026-12-02-cache-loading-phases/runs.sh $B $out/r 560 lfu:0.2:zipfian:1048576 lfu:0.2:zipfian:65536
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
