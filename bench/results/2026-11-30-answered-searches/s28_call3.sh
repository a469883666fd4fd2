#!/usr/bin/env bash
# Session 28, call 3: the GPU test suite on main + GPU rehash displacement (call 2 left it no time).
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
timeout $(( 500 - (t1 - t0) )) ctest --test-dir $B -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 240 --output-on-failure > $out/r/gpu_tests.log 2>&1
echo "gpu suite rc=$? ($(( $(date +%s) - t1 )) s): $(grep -E 'tests passed|tests failed' $out/r/gpu_tests.log)"
grep -E "^\s+[0-9]+ - .*(Failed|Timeout|Exception|Not Run)" $out/r/gpu_tests.log | head
grep -E "ResumedResize|Total Test time" $out/r/gpu_tests.log | head -3
tar czf $out/r.tgz -C $out r
echo "==== done $(( $(date +%s) - t0 )) s"
