#!/usr/bin/env bash
# Session 38, call 1: BktCache members that stay keep their lines (no copy) and LFU keeps a cached
# bucket unless clearly beaten (kKeepBonus). Build gpu_bench and gpu_cache_test, run the cache
# tests, then YCSB (host-mapped, 16.8 M items, 32-byte keys and values, Zipf 0.99, LFU 20%) at
# 2^16 with the bonus (32) and without (0) in the same build.
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
timeout 120 $B/tests/gpu_cache_test > $out/r/gpu_cache_test.log 2>&1; echo "gpu_cache_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' $out/r/gpu_cache_test.log | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)"
grep -B3 -A8 "Failure" $out/r/gpu_cache_test.log | head -30
# The new test must fail without the bonus.
[ -n "${NO_BONUS_CHECK:-}" ] && { GPHASH_CACHE_KEEP_BONUS=0 timeout 60 $B/tests/gpu_cache_test --gtest_filter='*LfuKeepsItsLines*' > $out/r/keep_test_without_bonus.log 2>&1; echo "keep test without the bonus rc=$? $(grep -m1 'lines loaded in' $out/r/keep_test_without_bonus.log)"; }
bash bench/results/2026-12-02-cache-kept-lines/runs.sh $B $out/r 575 ${RUNS:-lfu:0.2:zipfian:65536:0:32:load,c,a lfu:0.2:zipfian:65536:0:0:load,c,a}
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
