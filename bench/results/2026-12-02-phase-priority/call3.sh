#!/usr/bin/env bash
# Session 39, call 3: the landed tree (sweeps on a quarter of the SMs, the reload period counted in
# lookups, the heap's first chunk with a sixteenth more room). Builds gpu_bench and gpu_cache_test,
# runs gpu_cache_test, then YCSB at 2^16 and 2^20 (VARIANTS), the fill on one block per SM and
# on 33 or 66 blocks (a measurement switch, GPHASH_CACHE_FILL_BLOCKS, not to land).
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
export t0=$(date +%s)
B=$root/build-device/main
if [ ! -x $B/bench/gpu_bench ]; then
  ( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B -j 16 --target gpu_bench gpu_cache_test ) > $out/r/build.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi
timeout 120 $B/tests/gpu_cache_test > $out/r/gpu_cache_test.log 2>&1; echo "gpu_cache_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' $out/r/gpu_cache_test.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|Expected|Which is" $out/r/gpu_cache_test.log | head -20
# NAME:FILL_BLOCKS:SPEC (FILL_BLOCKS: the measurement switch GPHASH_CACHE_FILL_BLOCKS, 0 = one per SM)
for v in ${VARIANTS:-fill0:0:lfu:0.2:zipfian:65536 fill33:33:lfu:0.2:zipfian:65536 fill0:0:lfu:0.2:zipfian:1048576 fill33:33:lfu:0.2:zipfian:1048576 fill0:0:lfu:0.2:zipfian:1048576:8388608:32:load,c,a fill66:66:lfu:0.2:zipfian:65536:0:32:load,c,a}; do
  name=${v%%:*}; rest=${v#*:}; fill=${rest%%:*}; spec=${rest#*:}
  mkdir -p $out/r/$name; echo "== $name"
  GPHASH_CACHE_FILL_BLOCKS=$fill bash bench/results/2026-12-02-cache-kept-lines/runs.sh $B $out/r/$name ${RUN_DEADLINE:-560} $spec
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
