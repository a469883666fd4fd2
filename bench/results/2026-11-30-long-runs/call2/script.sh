#!/usr/bin/env bash
# Session 21, call 2: this tree built with the Python extension; where B and A spend their device
# time (ncu: per-kernel durations of one profiled workload, then stall reasons of single launches);
# the Python suite with CUDA. Summary last.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
py=$(command -v python3)
pyinc=$($py -c "import sysconfig; print(sysconfig.get_paths()['include'])")
pyargs=()
if [[ -f $pyinc/Python.h ]] && $py -m nanobind --cmake_dir >/dev/null 2>&1; then pyargs=(-DGPHASH_PYTHON=ON -DPython_EXECUTABLE=$py); else echo "no Python.h or nanobind: python skipped"; fi
t0=$(date +%s)
B=$root/build-device
( cmake -S . -B $B/main -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${pyargs[@]}" "${cmake_args[@]}" && cmake --build $B/main -j 16 ) > $out/r/build-main.log 2>&1 || { grep -B2 -A10 -m5 "error" $out/r/build-main.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
NEW=$B/main/bench/gpu_bench
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0"
NCU="ncu --clock-control none --cache-control none --profile-from-start off"
t1=$(date +%s)
timeout 150 $NCU --metrics gpu__time_duration.sum --print-summary per-kernel $NEW $mapped --workloads load,c,b,b --profile-workload 3 --ycsb-batch 1048576 > $out/r/ncu_b20.log 2>&1; echo "ncu b20 rc=$? $(( $(date +%s) - t1 )) s"
t1=$(date +%s)
timeout 150 $NCU --metrics gpu__time_duration.sum --print-summary per-kernel $NEW $mapped --workloads load,b,a,c --operations 4194304 --profile-workload 2 --ycsb-batch 65536 > $out/r/ncu_a16.log 2>&1; echo "ncu a16 rc=$? $(( $(date +%s) - t1 )) s"
t1=$(date +%s)
timeout 100 $NCU --metrics gpu__time_duration.sum --print-summary per-kernel $NEW $mapped --workloads load,b,a,c --operations 4194304 --profile-workload 3 --ycsb-batch 65536 > $out/r/ncu_c16.log 2>&1; echo "ncu c16 rc=$? $(( $(date +%s) - t1 )) s"
SECT="--section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SpeedOfLight"
t1=$(date +%s)
timeout 120 $NCU $SECT --kernel-name regex:"batch_kernel|long_run_kernel" --launch-skip 4 --launch-count 4 $NEW $mapped --workloads load,c,b,b --profile-workload 3 --ycsb-batch 1048576 > $out/r/ncu_b20_stalls.log 2>&1; echo "ncu b20 stalls rc=$? $(( $(date +%s) - t1 )) s"
t1=$(date +%s)
timeout 120 $NCU $SECT --kernel-name regex:"batch_kernel|long_run_kernel" --launch-skip 20 --launch-count 4 $NEW $mapped --workloads load,b,a --operations 4194304 --profile-workload 2 --ycsb-batch 65536 > $out/r/ncu_a16_stalls.log 2>&1; echo "ncu a16 stalls rc=$? $(( $(date +%s) - t1 )) s"
if [[ ${#pyargs[@]} -gt 0 ]]; then
  t1=$(date +%s)
  (cd $B && PYTHONPATH=$B/main/python timeout 200 $py -m pytest -q -rs $root/python/tests) > $out/r/pytest.log 2>&1; echo "pytest rc=$? $(( $(date +%s) - t1 )) s"
fi
tar czf $out/r.tgz -C $out r
echo "==== summary"
for f in ncu_b20 ncu_a16 ncu_c16; do echo "-- $f"; grep -B3 "gpu__time_duration" $out/r/$f.log | sed -E 's/\s+/ /g' | cut -c1-160 | head -40; done
grep -E "passed|failed" $out/r/pytest.log | tail -2
grep -E "^(FAILED|ERROR)" $out/r/pytest.log | head
