#!/usr/bin/env bash
# Session 37, call 3 (call 2's warm machine and build): more fill-block variants at 2^16 and at
# 2^20 with a phase every 8 M operations (so that some batches run without one); then the rest of
# the build and the GPU suite while the call has time.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
export t0=$(date +%s)
B=$root/build-device/main
[ -x $B/bench/gpu_bench ] || { echo "no build here (a fresh machine)"; exit 1; }
bash bench/results/2026-12-02-cache-loading-phases/runs.sh $B $out/r 200 ${RUNS:-lfu:0.2:zipfian:1048576:8388608:0:load,c,a lfu:0.2:zipfian:1048576:8388608:33:load,c,a lfu:0.2:zipfian:65536:0:0:load,c,a lfu:0.2:zipfian:65536:0:33:load,c,a}
cmake --build $B -j 16 > $out/r/build_all.log 2>&1; echo "build all rc=$? ($(( $(date +%s) - t0 )) s)"
(cd $B && timeout $(( 585 - ($(date +%s) - t0) )) ctest -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 300 > $out/r/gpu_suite.log 2>&1); echo "gpu suite rc=$? $(grep -E 'tests passed|tests failed' $out/r/gpu_suite.log) ($(( $(date +%s) - t0 )) s)"
grep -A20 "tests failed" $out/r/gpu_suite.log | head -20
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
