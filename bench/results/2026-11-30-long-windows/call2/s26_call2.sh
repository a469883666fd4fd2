#!/usr/bin/env bash
# Session 26, call 2: branch next/s26-long-windows with 256-position windows (long runs shared by a block per
# window) against main (peers-local/before.tgz = git archive of main dc50ab3), same run,
# alternating. First the long-run GPU tests of the branch, then YCSB host-mapped m16 x3, m20, then
# ncu per-kernel times of A at 2^16 for both.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device
mkdir -p /tmp/before && tar xzf peers-local/before.tgz -C /tmp/before
( cmake -S . -B $B/main -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B/main -j 9 --target gpu_bench gpu_engine_test gpu_cache_test ) > $out/r/build-main.log 2>&1 & p1=$!
( cmake -S /tmp/before -B $B/before -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON -DGPHASH_TESTS=OFF "${cmake_args[@]}" && cmake --build $B/before -j 7 --target gpu_bench ) > $out/r/build-before.log 2>&1 & p2=$!
wait $p1 || { grep -B2 -A10 -m5 error $out/r/build-main.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
wait $p2 || { tail -30 $out/r/build-before.log; exit 1; }
echo "builds: $(( $(date +%s) - t0 )) s"
t1=$(date +%s)
timeout 100 $B/main/tests/gpu_engine_test --gtest_filter='*LongRuns*:*HotKey*:*DuplicateKeys*' > $out/r/t_engine.log 2>&1; echo "gpu_engine_test long runs rc=$? ($(( $(date +%s) - t1 )) s)"
t1=$(date +%s)
timeout 100 $B/main/tests/gpu_cache_test --gtest_filter='*LongRuns*' > $out/r/t_cache.log 2>&1; echo "gpu_cache_test long runs rc=$? ($(( $(date +%s) - t1 )) s)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|OK \]" $out/r/t_engine.log $out/r/t_cache.log | tail -12
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0 --workloads load,c,b,a,b,a"
NCU="ncu --clock-control none --cache-control none --profile-from-start off"
for v in main before; do
  t1=$(date +%s)
  timeout 70 $NCU --metrics gpu__time_duration.sum --print-summary per-kernel $B/$v/bench/gpu_bench $mapped --workloads load,a,a --operations 4194304 --profile-workload 2 --ycsb-batch 65536 > $out/r/ncu_a16_$v.log 2>&1; echo "ncu a16 $v rc=$? $(( $(date +%s) - t1 )) s"
done
tar czf $out/r.tgz -C $out r
run() {  # run NAME BIN ARGS...
  local name=$1 bin=$2; shift 2
  [ $(( $(date +%s) - t0 )) -lt 555 ] || { echo "$name skipped"; return; }
  local s=$(date +%s)
  timeout 30 $bin "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name rc=$? ($(( $(date +%s) - s )) s)"
}
for rep in 1 2; do
  run before_m16_$rep $B/before/bench/gpu_bench $mapped --ycsb-batch 65536
  run after_m16_$rep $B/main/bench/gpu_bench $mapped --ycsb-batch 65536
done
run after_m20 $B/main/bench/gpu_bench $mapped --ycsb-batch 1048576
run before_m20 $B/before/bench/gpu_bench $mapped --ycsb-batch 1048576
tar czf $out/r.tgz -C $out r
echo "==== summary"
for f in $out/r/ncu_a16_*.log; do echo "$f"; grep -E "^  [a-z_]+.*kernel|gpu__time_duration" $f | paste - - | sed -E "s/ +/ /g" | cut -c1-150 | head -14; done
for f in $out/r/*m*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(name, " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}' + ('' if r["not_found"]==0 and r["bad_values"]==0 else f'(nf {r["not_found"]},bad {r["bad_values"]})') for r in d["results"]))
PY
done
