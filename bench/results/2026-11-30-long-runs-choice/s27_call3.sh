#!/usr/bin/env bash
# Session 27, call 3 (on call 2's warm machine and build): the GPU tests that must run alone; the
# once-flaky thread-variant property case repeated; gphash-server beside memcached -t 8 (CPU
# engine, then the GPU engine), scripts/server_bench.sh QUICK=1 REPEAT=2.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
export PATH=/usr/local/cuda/bin:$PATH
B=$root/build-device
t1=$(date +%s)
timeout 300 ctest --test-dir $B/main -L gpu -R "GpuMemoryFaults|gpu_contention" --timeout 280 --output-on-failure > $out/r/gpu_tests_alone.log 2>&1
echo "alone rc=$? ($(( $(date +%s) - t1 )) s): $(grep -E 'tests passed|tests failed' $out/r/gpu_tests_alone.log)"
grep -E "Test +#" $out/r/gpu_tests_alone.log
t1=$(date +%s)
timeout 60 $B/main/tests/gpu_engine_test --gtest_filter='*GpuPropertyTest*2L2H8S_k8_v40_thread*:*GpuPropertyTest*2L2H8S_k8_v40_direct*' --gtest_repeat=100 --gtest_break_on_failure > $out/r/flake.log 2>&1
echo "flake loop rc=$? ($(( $(date +%s) - t1 )) s): $(grep -c '^\[       OK \]' $out/r/flake.log) ok, $(grep -c '^\[  FAILED  \]' $out/r/flake.log) failed"
grep -m3 -B3 "resize could not\|Failure" $out/r/flake.log
common="QUICK=1 REPEAT=2 SERVER_THREADS=8 LOADGEN_THREADS=8 CONNECTIONS=128 RUN_SECONDS=4 GPHASH_SERVER=$B/main/gphash-server LOADGEN=$B/main/gphash-server-loadgen"
for engine in cpu gpu; do
  t1=$(date +%s)
  env $common ENGINE=$engine OUT=$out/r/server_$engine.json timeout 200 scripts/server_bench.sh > $out/r/server_$engine.log 2>&1
  echo "server $engine: rc=$? ($(( $(date +%s) - t1 )) s)"
done
tar czf $out/r.tgz -C $out r
for engine in cpu gpu; do echo "== $engine"; sed -n '/medians/,$p' $out/r/server_$engine.log; done
