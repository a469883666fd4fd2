#!/usr/bin/env bash
# Session 34, call 2 (the warm machine of call 1, its build): the GPU suite and the GPU kill test
# on this tree; LOAD from a small table again (own bucket / spread, alternating), presized; and
# the same LOAD with the pool on huge pages (a tmpfs mounted huge=always, hugetlbfs) where the
# machine allows.
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
bin=$B/bench/gpu_bench
small="--sections gpu-batches --placement mapped --ycsb-records 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --ycsb-batch 1048576 --capacity 83886 --workloads load"
run() { local name=$1; shift; local s=$(date +%s)
  [ $(( s - t0 )) -gt 540 ] && { echo "skip $name"; return; }
  timeout 40 env GPHASH_GROWTH_TRACE=1 "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1; echo "$name rc=$? ($(( $(date +%s) - s )) s)"; }
run spread_res2 env GPHASH_REHASH_SPREAD=1 $bin $small --reserve-pool-bytes 3221225472
run own_res2 $bin $small --reserve-pool-bytes 3221225472
run spread2 env GPHASH_REHASH_SPREAD=1 $bin $small
run own2 $bin $small
run presized $bin ${small/--capacity 83886/--capacity 16777216}
if [ "$(id -u)" = 0 ]; then
  mkdir -p /tmp/thp && mount -t tmpfs -o huge=always,size=16G tmpfs /tmp/thp 2>> $out/r/machine2.log && run own_thp $bin $small --pool-dir /tmp/thp
  echo 3072 > /proc/sys/vm/nr_hugepages 2>> $out/r/machine2.log
  grep -i huge /proc/meminfo >> $out/r/machine2.log
  hp=$(mount | awk '$5=="hugetlbfs"{print $3; exit}')
  [ -z "$hp" ] && mkdir -p /tmp/hp && mount -t hugetlbfs none /tmp/hp 2>> $out/r/machine2.log && hp=/tmp/hp
  [ -n "$hp" ] && run own_hugetlbfs $bin $small --pool-dir $hp
fi
for f in $out/r/*.log; do grep -H "gpu-batches (gpu mapped): load" $f | head -1 | sed 's|.*/r/||'; done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
