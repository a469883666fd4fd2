#!/usr/bin/env bash
# Session 29, call 1: the GPU suite on main (legacy-stream wait, Device syncs, the new Streams test), then the gpm_gpu_test contention loop that failed 1 in 144 in s28.
# Only the GPU test targets are built.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device/main
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON -DGPHASH_BENCH=OFF -DGPHASH_SERVER=OFF "${cmake_args[@]}" \
  && cmake --build $B -j 16 --target gpu_engine_test gpu_cache_test gpu_api_test gpu_snapshot_test gpm_gpu_test slab_list_gpu_test gpu_shard_test gpm_crash_test ) > $out/r/build.log 2>&1 \
  || { grep -B2 -A10 -m5 error $out/r/build.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
t1=$(date +%s)
timeout $(( 470 - (t1 - t0) )) ctest --test-dir $B -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 240 --output-on-failure > $out/r/gpu_tests.log 2>&1
echo "gpu suite rc=$? ($(( $(date +%s) - t1 )) s): $(grep -E 'tests passed|tests failed' $out/r/gpu_tests.log)"
grep -E "^\s+[0-9]+ - .*(Failed|Timeout|Exception|Not Run)" $out/r/gpu_tests.log | head
grep -E "ResumedResize|Total Test time" $out/r/gpu_tests.log | head -3
tar czf $out/r.tgz -C $out r
echo "==== done $(( $(date +%s) - t0 )) s"
# The s28 flake: 12 processes at once, 6 runs each, of the conventional-log KVS cases (1 failure in 144 before 533bc4d).
cd $B/tests && mkdir -p $out/r/flake && for p in $(seq 1 12); do ( for i in 1 2 3 4 5 6; do timeout 30 ./gpm_gpu_test --gtest_filter='Logs/GpmWorkloads.KvsSets*conventional*' > /tmp/g$p.$i.log 2>&1 || cp /tmp/g$p.$i.log $out/r/flake/; done ) & done; wait
echo "gpm kvs contention: $(ls $out/r/flake | wc -l) failing runs of 72 (2 cases each)"
cd $root; tar czf $out/r.tgz -C $out r
