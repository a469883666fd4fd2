#!/usr/bin/env bash
# Session 38, call 2 (call 1's warm machine and build): 2^20 with a phase every 8 M operations and
# with the default 2 M, with and without the bonus, a second 2^16 pair; then the rest of the build
# and the GPU suite.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
export t0=$(date +%s)
B=$root/build-device/main
[ -x $B/bench/gpu_bench ] || { echo "no build here (a fresh machine)"; exit 1; }
bash bench/results/2026-12-02-cache-kept-lines/runs.sh $B $out/r ${RUN_DEADLINE:-300} ${RUNS:-lfu:0.2:zipfian:1048576:8388608:32:load,c,a lfu:0.2:zipfian:1048576:8388608:0:load,c,a lfu:0.2:zipfian:1048576:0:32:load,c,b,a lfu:0.2:zipfian:65536:0:32:load,c,b,a lfu:0.2:zipfian:65536:0:0:load,c,b,a}
cmake --build $B -j 16 > $out/r/build_all.log 2>&1; echo "build all rc=$? ($(( $(date +%s) - t0 )) s)"
(cd $B && timeout $(( 585 - ($(date +%s) - t0) )) ctest -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 300 > $out/r/gpu_suite.log 2>&1); echo "gpu suite rc=$? $(grep -E 'tests passed|tests failed' $out/r/gpu_suite.log) ($(( $(date +%s) - t0 )) s)"
grep -A20 "tests failed" $out/r/gpu_suite.log | head -20
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
