#!/usr/bin/env bash
# Session 39, call 2 (call 1's warm machine and build): more variants (VARIANTS as in call1.sh, with
# WORKLOADS and BATCH), then the rest of the build and the GPU suite on the measured tree.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
export t0=$(date +%s)
B=$root/build-device/main
[ -x $B/bench/gpu_bench ] || { echo "no build here (a fresh machine)"; exit 1; }
runs=bench/results/2026-12-02-cache-kept-lines/runs.sh
for v in ${VARIANTS:-}; do
  IFS=: read -r name batch_prio load_prio select batch workloads <<<"$v"
  mkdir -p $out/r/$name; echo "== $name"
  GPHASH_BATCH_STREAM_PRIORITY=$batch_prio GPHASH_CACHE_LOAD_PRIORITY=$load_prio GPHASH_CACHE_SELECT_BLOCKS=$select \
    bash $runs $B $out/r/$name ${RUN_DEADLINE:-300} lfu:0.2:zipfian:${batch:-65536}:0:32:${workloads:-load,c}
done
[ -n "${NO_SUITE:-}" ] || {
cmake --build $B -j 16 > $out/r/build_all.log 2>&1; echo "build all rc=$? ($(( $(date +%s) - t0 )) s)"
(cd $B && timeout $(( 585 - ($(date +%s) - t0) )) ctest -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 300 > $out/r/gpu_suite.log 2>&1); echo "gpu suite rc=$? $(grep -E 'tests passed|tests failed' $out/r/gpu_suite.log) ($(( $(date +%s) - t0 )) s)"
grep -A20 "tests failed" $out/r/gpu_suite.log | head -20
}
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
