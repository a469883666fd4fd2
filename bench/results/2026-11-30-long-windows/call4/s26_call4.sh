#!/usr/bin/env bash
# Session 26, call 4 (on call 3's warm machine and build): the GPU tests that must run alone.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
export PATH=/usr/local/cuda/bin:$PATH
B=$root/build-device
t1=$(date +%s)
timeout 400 ctest --test-dir $B/main -L gpu -R "GpuMemoryFaults|gpu_contention" --timeout 300 --output-on-failure > $out/r/gpu_tests_alone.log 2>&1
echo "alone rc=$? ($(( $(date +%s) - t1 )) s): $(grep -E 'tests passed|tests failed' $out/r/gpu_tests_alone.log)"
grep -E "Test +#" $out/r/gpu_tests_alone.log
