#!/usr/bin/env bash
# Session 23, call 2 (warm, call 1's build): crash + kill tests, then where B's time goes at 2^16 (ncu).
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
B=$root/build-device
ls $B/main/bench/gpu_bench $B/crash/tests/crash/gpu_crash_test >/dev/null || exit 1
t1=$(date +%s)
timeout 120 $B/crash/tests/crash/gpu_crash_test > $out/r/gpu_crash_test.log 2>&1; echo "gpu_crash_test rc=$? $(( $(date +%s) - t1 )) s: $(grep -E '^\[  (PASSED|FAILED)' $out/r/gpu_crash_test.log | tr '\n' ' ')"
t1=$(date +%s)
GPHASH_CRASH_ENGINE=gpu GPHASH_KILLS=200 GPHASH_KILL_SECONDS=50 timeout 120 $B/main/tests/crash/kill_test > $out/r/gpu_kill_test.log 2>&1; echo "kill_test rc=$? $(( $(date +%s) - t1 )) s: $(tail -3 $out/r/gpu_kill_test.log | tr '\n' ' ')"
NEW=$B/main/bench/gpu_bench
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0"
NCU="ncu --clock-control none --cache-control none --profile-from-start off"
t1=$(date +%s)
timeout 100 $NCU --metrics gpu__time_duration.sum --print-summary per-kernel $NEW $mapped --workloads load,b,b --operations 4194304 --profile-workload 2 --ycsb-batch 65536 > $out/r/ncu_b16.log 2>&1; echo "ncu b16 rc=$? $(( $(date +%s) - t1 )) s"
t1=$(date +%s)
timeout 150 $NCU --section SourceCounters --section WarpStateStats --import-source yes --kernel-name regex:batch_kernel --launch-skip 20 --launch-count 1 -o $out/r/b16 $NEW $mapped --workloads load,b,b --operations 4194304 --profile-workload 2 --ycsb-batch 65536 > $out/r/ncu_b16_src.log 2>&1; echo "ncu b16 src rc=$? $(( $(date +%s) - t1 )) s"
ncu -i $out/r/b16.ncu-rep --page source --csv --print-source sass > $out/r/b16_sass.csv 2> $out/r/b16_sass.err; echo "sass csv rc=$? $(wc -l < $out/r/b16_sass.csv) lines"
ncu -i $out/r/b16.ncu-rep --page details --print-details all > $out/r/b16_details.txt 2>&1
rm -f $out/r/b16.ncu-rep
gzip $out/r/b16_sass.csv
tar czf $out/r.tgz -C $out r
echo "==== summary"
python3 - $out/r/ncu_b16.log <<'PY'
import re,sys
name=None
for line in open(sys.argv[1]):
    m=re.match(r'\s+(?:void )?(?:gphash::)?(?:engine::gpu::)?([A-Za-z_0-9:]+).*Invocations (\d+)',line)
    if m: name=(m.group(1),m.group(2))
    if 'gpu__time_duration.sum' in line and name:
        print(name[0][:60], 'x'+name[1], line.split()[-1], 'us avg'); name=None
PY
grep "gpu-batches" $out/r/ncu_b16.log | head -3 | cut -c1-200
