#!/usr/bin/env bash
# Session 33, call 2: long runs of several keys regrouped and combined by the whole block
# (walk_by_key). Full build; the shared-prefix tests (timing twice); the GPU suite; a short GPU
# kill test; YCSB at 2^16 host-mapped (sanity against the session-32 figures).
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device/main
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B -j 16 ) > $out/r/build.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
for k in 1 2; do
$B/tests/gpu_engine_test --gtest_filter='*ShareAHashPrefix*:*SharingAPrefix*:*SharesItsPrefix*:*LongRunsAcross*' > $out/r/new_tests_$k.log 2>&1; echo "new tests rc=$? $(grep -c '^\[       OK' $out/r/new_tests_$k.log) ok ($(( $(date +%s) - t0 )) s)"
grep -E "hot key's batch|FAILED|Failure" $out/r/new_tests_$k.log | head -12
done
(cd $B && ctest -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 300 > $out/r/gpu_suite.log 2>&1); echo "gpu suite rc=$? $(grep -E 'tests passed|tests failed' $out/r/gpu_suite.log) ($(( $(date +%s) - t0 )) s)"
grep -A20 "tests failed" $out/r/gpu_suite.log | head -20
grep -E "(LongRuns|SharingAPrefix|SharesItsPrefix|ShareAHash).*sec" $out/r/gpu_suite.log
GPHASH_CRASH_ENGINE=gpu GPHASH_KILLS=60 GPHASH_KILL_SECONDS=30 $B/tests/crash/kill_test > $out/r/gpu_kill_test.log 2>&1; echo "kill test rc=$? $(grep -E 'kills|PASSED|FAILED' $out/r/gpu_kill_test.log | head -3 | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)"
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0 --workloads load,b,a,b,a"
bin=$B/bench/gpu_bench
run() { local name=$1; shift; local s=$(date +%s)
  [ $(( s - t0 )) -gt 500 ] && { echo "skip $name"; return; }
  timeout 45 $bin "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1; echo "$name rc=$? ($(( $(date +%s) - s )) s)"; }
run m16_1 $mapped --ycsb-batch 65536
run m16_2 $mapped --ycsb-batch 65536
for f in $out/r/*.json; do [ -f "$f" ] && python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(f"{name:11s}", " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.1f}/{r["ops_per_second"]/1e6:.0f}' for r in d["results"]))
PY
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
