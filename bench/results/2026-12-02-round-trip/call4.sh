#!/usr/bin/env bash
# Session 41, call 4 (tree: main + call4-tree.diff; run with a budget for gpu_bench and pool_test only:
# GPHASH_TARGETS="gpu_bench pool_test", which also runs pool_test's GPU cases instead of the suite): the GPU engine reserves its growth ahead as the
# CPU engine does (TableMeta::reserve_growth_ahead), against the same build with it off
# (GPHASH_GROW_AHEAD=0, a temporary switch): LOAD into a small table; where a small staged batch's
# time goes (GPHASH_SMALL_TRACE=1, a temporary trace); the GPU suite. Resumable on a warm machine
# (markers under the build dir; no job starts after DEADLINE s).
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s); deadline=${DEADLINE:-560}
B=$root/build-device/main; done_dir=$root/build-device/done; mkdir -p $done_dir
left() { echo $(( deadline - ($(date +%s) - t0) )); }
if [ ! -f $done_dir/build4 ]; then
  ( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B -j 16 ${GPHASH_TARGETS:+--target $GPHASH_TARGETS} ) > $out/r/build.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
  touch $done_dir/build4; echo "build: $(( $(date +%s) - t0 )) s"
fi
small_table="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 83886 --ycsb-key-width 32 --ycsb-value-width 32 --workloads load"
job() { local name=$1 ahead=$2; shift 2
  [ -f $done_dir/$name ] && return
  [ $(left) -lt 25 ] && { echo "later: $name"; return; }
  local s=$(date +%s)
  GPHASH_GROW_AHEAD=$ahead timeout 60 $B/bench/gpu_bench $small_table "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name rc=$? ($(( $(date +%s) - s )) s)"; touch $done_dir/$name; }
if [ -n "${GPHASH_TARGETS:-}" ] && [ ! -f $done_dir/pool_gpu ]; then
  $B/tests/pool_test --gtest_filter='*/gpu' > $out/r/pool_test_gpu.log 2>&1; echo "pool_test */gpu rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $out/r/pool_test_gpu.log | tr '\n' ' ')"
  grep -B3 -A10 "Failure" $out/r/pool_test_gpu.log | head -40; touch $done_dir/pool_gpu
fi
job ahead20_1 1 --ycsb-batch 1048576
job off20_1 0 --ycsb-batch 1048576
job ahead20_2 1 --ycsb-batch 1048576
job off20_2 0 --ycsb-batch 1048576
job ahead16 1 --ycsb-batch 65536
job off16 0 --ycsb-batch 65536
if [ ! -f $done_dir/trace16 ] && [ $(left) -gt 30 ]; then
  GPHASH_SMALL_TRACE=1 timeout 60 $B/bench/gpu_bench --sections small --small-sizes 16 > $out/r/trace16.log 2>&1; echo "trace16 rc=$?"
  grep -E "small trace|small \(" $out/r/trace16.log; touch $done_dir/trace16
fi
if [ -z "${GPHASH_TARGETS:-}" ] && [ ! -f $done_dir/suite ] && [ $(left) -gt 125 ]; then
  s=$(date +%s)
  (cd $B && ctest -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 300 --output-on-failure > $out/r/gpu_suite.log 2>&1); echo "gpu suite rc=$? $(grep -E 'tests passed|tests failed' $out/r/gpu_suite.log) ($(( $(date +%s) - s )) s)"
  grep -A20 "tests FAILED" $out/r/gpu_suite.log | head -20; touch $done_dir/suite
fi
for f in $out/r/*20_*.json $out/r/*16.json; do [ -f "$f" ] && python3 - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["gpu_batches"]
name = sys.argv[1].split('/')[-1][:-5]
for r in d["results"]:
    print(f"{name:10s} {r['workload']}: {r.get('device_ops_per_second', 0) / 1e6:.1f} device, {r['ops_per_second'] / 1e6:.1f} end to end;",
          " ".join(f"{k} {r[k]:.3f}" for k in ("resize_seconds", "heap_grow_seconds", "slow_seconds") if k in r),
          "bad" if r.get("not_found") or r.get("bad_values") else "")
PY
done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
