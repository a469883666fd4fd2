#!/usr/bin/env bash
# Session 35, call 3 (a fresh machine; the GPU engine as at 947f3b7, growth ahead dropped): the
# GPU trap injection (gpu_crash_test, a crash-points build), not run for several sessions; and a
# CPU-only build of gphash-server for call 4.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device
( cmake -S . -B $B/cpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPHASH_CUDA=OFF -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build $B/cpu -j 4 --target gphash-server gphash-server-loadgen ) > $out/r/build-cpu.log 2>&1 & p1=$!
( cmake -S . -B $B/crash -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_CRASH_POINTS=ON -DGPHASH_BENCH=OFF "${cmake_args[@]}" && timeout 470 cmake --build $B/crash -j 16 --target gpu_crash_test crash_child ) > $out/r/build-crash.log 2>&1
echo "crash build rc=$? ($(( $(date +%s) - t0 )) s)"
wait $p1; echo "cpu server build rc=$? $(ls $B/cpu/gphash-server 2>&1)"
left=$(( 590 - ($(date +%s) - t0) ))
[ -x $B/crash/tests/crash/gpu_crash_test ] && { timeout $left $B/crash/tests/crash/gpu_crash_test > $out/r/gpu_crash.log 2>&1; echo "gpu_crash_test rc=$? ($(( $(date +%s) - t0 )) s)"; }
grep -E "traps verified|CUDA failures|PASSED|FAILED|OK \]" $out/r/gpu_crash.log | tail -8
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
