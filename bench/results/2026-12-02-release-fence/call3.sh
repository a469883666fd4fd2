#!/usr/bin/env bash
# Session 40, calls 3-4: no commit barrier after updates (this tree's default) against the barrier
# (GPHASH_UPDATE_FENCE=on, a measurement switch of this tree), alternating in one build; then
# PoolExhaustion's GPU case, the GPU suite and the GPU kill test on the default. Resumable: a job done (marker under the build dir) is skipped, and no job starts
# after DEADLINE seconds, so a second call on the warm machine runs the rest.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s); deadline=${DEADLINE:-520}
B=$root/build-device/main; done_dir=$root/build-device/done; mkdir -p $done_dir
if [ ! -f $done_dir/build ]; then
  ( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B -j 16 ) > $out/r/build.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
  touch $done_dir/build; echo "build: $(( $(date +%s) - t0 )) s"
  # What each fence compiles to on sm_90.
  printf '%s\n' '__global__ void sc(unsigned long long* a, unsigned long long* b) { a[threadIdx.x] = 1; __threadfence_system(); b[threadIdx.x] = 2; }' \
    '__global__ void ar(unsigned long long* a, unsigned long long* b) { a[threadIdx.x] = 1; asm volatile("fence.acq_rel.sys;" ::: "memory"); b[threadIdx.x] = 2; }' > /tmp/fence.cu
  (cd /tmp && nvcc -arch=sm_90 -cubin -o fence.cubin fence.cu && cuobjdump -sass fence.cubin | grep -E "Function|MEMBAR|FENCE|ERRBAR|CCTL") > $out/r/fence_sass.txt 2>&1
  cat $out/r/fence_sass.txt
fi
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32"
complete="--cache lfu --cache-fraction 1.0 --workloads load,c,b,a,b,a"
lfu="--cache lfu --cache-fraction 0.2 --workloads load,c,b,a,b,a"
job() { local name=$1 fence=$2; shift 2
  [ -f $done_dir/$name ] && return
  [ $(( $(date +%s) - t0 )) -gt $deadline ] && { echo "later: $name"; return; }
  local s=$(date +%s)
  GPHASH_UPDATE_FENCE=$fence timeout 90 $B/bench/gpu_bench $mapped "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name rc=$? ($(( $(date +%s) - s )) s)"; touch $done_dir/$name; }
k8="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 8 --ycsb-value-width 8 --workloads load,c,b,a,b,a"
job off16_1 off $complete --ycsb-batch 65536
job on16_1 on $complete --ycsb-batch 65536
job off16_2 off $complete --ycsb-batch 65536
job on16_2 on $complete --ycsb-batch 65536
job off20 off $complete --ycsb-batch 1048576
job on20 on $complete --ycsb-batch 1048576
mapped="$k8"
job k8_off16 off --ycsb-batch 65536
job k8_on16 on --ycsb-batch 65536
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32"
if [ ! -f $done_dir/pool_test ] && [ -f $done_dir/on20 ]; then
  $B/tests/pool_test --gtest_filter='*PoolExhaustion*' > $out/r/pool_test.log 2>&1; echo "pool_test PoolExhaustion rc=$? $(grep -E '^\[  (PASSED|FAILED)' $out/r/pool_test.log | tr '\n' ' ')"; touch $done_dir/pool_test
fi
if [ ! -f $done_dir/suite ] && [ $(( $(date +%s) - t0 )) -lt $(( deadline - 60 )) ]; then
  s=$(date +%s)
  (cd $B && ctest -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 300 > $out/r/gpu_suite.log 2>&1); echo "gpu suite rc=$? $(grep -E 'tests passed|tests failed' $out/r/gpu_suite.log) ($(( $(date +%s) - s )) s)"
  grep -A20 "tests failed" $out/r/gpu_suite.log | head -20; touch $done_dir/suite
fi
if [ ! -f $done_dir/kill ] && [ -f $done_dir/suite ] && [ $(( $(date +%s) - t0 )) -lt $(( deadline - 40 )) ]; then
  GPHASH_CRASH_ENGINE=gpu GPHASH_KILLS=40 GPHASH_KILL_SECONDS=25 timeout 100 $B/tests/crash/kill_test > $out/r/gpu_kill_test.log 2>&1; echo "gpu kill test rc=$? $(grep -E 'kills|PASSED|FAILED' $out/r/gpu_kill_test.log | head -3 | tr '\n' ' ')"; touch $done_dir/kill
fi
job lfu_off16 off $lfu --ycsb-batch 65536
job lfu_on16 on $lfu --ycsb-batch 65536
for f in $out/r/*.json; do [ -f "$f" ] && python3 - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["gpu_batches"]
name = sys.argv[1].split('/')[-1][:-5]
print(f"{name:10s}", " ".join(f'{r["workload"]}:{r.get("device_ops_per_second", 0) / 1e6:.0f}/{r["ops_per_second"] / 1e6:.0f}' for r in d["results"]),
      "bad" if any(r["not_found"] or r["bad_values"] for r in d["results"]) else "")
PY
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
