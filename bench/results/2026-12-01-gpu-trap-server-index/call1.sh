#!/usr/bin/env bash
# Session 36, call 1 (a fresh machine): the crash-points build for the GPU trap injection
# (gpu_crash_test, not run for several sessions) in a call of its own, and beside it a CPU-only
# build of gphash-server (HEAD) for call 2.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device
( cmake -S . -B $B/cpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPHASH_CUDA=OFF -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build $B/cpu -j 3 --target gphash-server gphash-server-loadgen ) > $out/r/build-cpu.log 2>&1 & p1=$!
( cmake -S . -B $B/crash -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_CRASH_POINTS=ON -DGPHASH_BENCH=OFF "${cmake_args[@]}" && timeout 555 cmake --build $B/crash -j 16 --target gpu_crash_test crash_child ) > $out/r/build-crash.log 2>&1
echo "crash build rc=$? ($(( $(date +%s) - t0 )) s)"; tail -2 $out/r/build-crash.log
wait $p1; echo "cpu server build rc=$? $(ls $B/cpu/gphash-server 2>&1)"
left=$(( 585 - ($(date +%s) - t0) ))
[ -x $B/crash/tests/crash/gpu_crash_test ] && [ $left -gt 20 ] && { timeout $left $B/crash/tests/crash/gpu_crash_test > $out/r/gpu_crash.log 2>&1; echo "gpu_crash_test rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "traps verified|CUDA failures|verified|PASSED|FAILED|OK \]" $out/r/gpu_crash.log | tail -8; }
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
