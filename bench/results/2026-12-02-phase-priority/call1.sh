#!/usr/bin/env bash
# Session 39, call 1, with next-phase-priority.diff applied (measurement switches, never to land
# as they are): does the phase cost the batches at 2^16 because its kernels take SMs the batch
# kernel would use? Variants: the batch stream above the load stream (CUDA priority -1 or -5 against
# 0), the selection's sweeps on 132 or 33 blocks instead of one per 256 bucket ids, and both.
# Builds gpu_bench and gpu_cache_test (~500 s on a fresh H200 machine), then YCSB LOAD and C at 2^16.
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
runs=bench/results/2026-12-02-cache-kept-lines/runs.sh
for v in ${VARIANTS:-base:0:0:0 batchprio1:-1:0:0 batchprio5:-5:0:0 select132:0:0:132 select33:0:0:33 both:-1:0:132}; do
  IFS=: read -r name batch_prio load_prio select <<<"$v"
  mkdir -p $out/r/$name; echo "== $name"
  GPHASH_BATCH_STREAM_PRIORITY=$batch_prio GPHASH_CACHE_LOAD_PRIORITY=$load_prio GPHASH_CACHE_SELECT_BLOCKS=$select \
    bash $runs $B $out/r/$name ${DEADLINE:-570} lfu:0.2:zipfian:${BATCH:-65536}:0:32:${WORKLOADS:-load,c}
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
