#!/usr/bin/env bash
# Session 21, call 1: long runs shared by a block (this tree) against HEAD (the patch reversed):
# the GPU tests that run long runs, then YCSB host-mapped with the complete cache and in GPU
# memory, alternating, base first. Summary last.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $out/r/gpu.txt
rm -rf /tmp/base && mkdir /tmp/base && git ls-files -z | xargs -0 cp --parents -t /tmp/base && (cd /tmp/base && patch -R -p1 -s < $root/peers-local/longruns.patch) || { echo "baseline tree failed"; exit 1; }
t0=$(date +%s)
B=$root/build-device
( cmake -S . -B $B/main -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON -DCMAKE_CUDA_FLAGS="-Xptxas -v" "${cmake_args[@]}" && cmake --build $B/main -j 16 ) > $out/r/build-main.log 2>&1 & p1=$!
( cmake -S /tmp/base -B $B/base -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_TESTS=OFF "${cmake_args[@]}" && cmake --build $B/base -j 16 --target gpu_bench ) > $out/r/build-base.log 2>&1 & p2=$!
wait $p1 || { grep -B2 -A10 -m5 "error" $out/r/build-main.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
wait $p2 || { grep -B2 -A10 -m5 "error" $out/r/build-base.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
grep -A2 "long_run_kernel" $out/r/build-main.log | grep -m4 -E "registers|spill" > $out/r/long_run_regs.txt
t1=$(date +%s)
$B/main/tests/gpu_engine_test --gtest_filter='*LongRuns*:*HotKey*:*Duplicate*:*Property*' > $out/r/gpu_engine_test.log 2>&1; echo "gpu_engine_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' $out/r/gpu_engine_test.log | tr '\n' ' ')"
$B/main/tests/gpu_cache_test > $out/r/gpu_cache_test.log 2>&1; echo "gpu_cache_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' $out/r/gpu_cache_test.log | tr '\n' ' ')"
echo "tests: $(( $(date +%s) - t1 )) s"
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --workloads load,c,b,a,b,a --cache lfu --cache-fraction 1.0"
hbm="--sections gpu-batches --placement gpu-memory --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 8 --ycsb-value-width 8 --workloads load,c,b,a"
run() {  # run NAME BINARY ARGS...
  local name=$1 bin=$2; shift 2
  local s=$(date +%s)
  timeout 120 "$bin" "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name ($(( $(date +%s) - s )) s) rc=$?"
}
BASE=$B/base/bench/gpu_bench; NEW=$B/main/bench/gpu_bench
run base_m20 $BASE $mapped --ycsb-batch 1048576
run new_m20 $NEW $mapped --ycsb-batch 1048576
run new_m16 $NEW $mapped --ycsb-batch 65536
run base_m16 $BASE $mapped --ycsb-batch 65536
run base_h20 $BASE $hbm --ycsb-batch 1048576
run new_h20 $NEW $hbm --ycsb-batch 1048576
run new_m20_2 $NEW $mapped --ycsb-batch 1048576
run base_m20_2 $BASE $mapped --ycsb-batch 1048576
tar czf $out/r.tgz -C $out r
echo "==== summary"
cat $out/r/long_run_regs.txt
for f in $out/r/*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(name, " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}(p50 {r["batch_p50_seconds"]*1e3:.2f}ms,nf {r["not_found"]},bad {r["bad_values"]})' for r in d["results"]))
PY
done
