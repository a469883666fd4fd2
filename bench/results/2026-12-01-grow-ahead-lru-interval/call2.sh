#!/usr/bin/env bash
# Session 35, call 2 (the warm machine of call 1, its build): the GPU suite and the GPU kill test
# on this tree; then gphash-server (CPU index, -t 8) with a hit's LRU move at most once a minute
# (memcached's rule, the new default) against every hit moving its item (GPHASH_LRU_UPDATE_INTERVAL=0,
# a temporary switch in this tree) and memcached, alternating, one request in flight.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device/main
[ -x $B/bench/gpu_bench ] || { echo "no build here (a fresh machine)"; exit 1; }
(cd $B && ctest -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 300 > $out/r/gpu_suite.log 2>&1); echo "gpu suite rc=$? $(grep -E 'tests passed|tests failed' $out/r/gpu_suite.log) ($(( $(date +%s) - t0 )) s)"
grep -A20 "tests failed" $out/r/gpu_suite.log | head -20
GPHASH_CRASH_ENGINE=gpu GPHASH_KILLS=60 GPHASH_KILL_SECONDS=30 $B/tests/crash/kill_test > $out/r/gpu_kill_test.log 2>&1; echo "kill test rc=$? $(grep -E 'kills|PASSED|FAILED' $out/r/gpu_kill_test.log | head -3 | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)"
bash bench/results/2026-12-01-grow-ahead-lru-interval/srv.sh $B $out/r/srv.jsonl 3 > $out/r/srv.log 2>&1; echo "server runs rc=$? ($(( $(date +%s) - t0 )) s)"
python3 bench/results/2026-12-01-grow-ahead-lru-interval/srv_table.py $out/r/srv.jsonl
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
