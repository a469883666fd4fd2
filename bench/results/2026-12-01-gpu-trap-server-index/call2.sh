#!/usr/bin/env bash
# Session 36, call 2 (call 1's warm machine): gpu_crash_test on call 1's crash-points build, then
# gphash-server (CPU index, HEAD) with its index started small (the default since 3512080) against
# the same binary with the old start (-o hashpower=22) and memcached, alternating (srv.sh).
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device
[ -x $B/cpu/gphash-server ] || { echo "no build here (a fresh machine)"; exit 1; }
if [ -x $B/crash/tests/crash/gpu_crash_test ]; then
  timeout 300 $B/crash/tests/crash/gpu_crash_test > $out/r/gpu_crash.log 2>&1; echo "gpu_crash_test rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -E "traps verified|CUDA failures|verified|PASSED|FAILED|OK \]" $out/r/gpu_crash.log | tail -8
else
  timeout 200 cmake --build $B/crash -j 16 --target gpu_crash_test crash_child > $out/r/build-crash2.log 2>&1; echo "crash build (cont.) rc=$?"
fi
srv="$B/cpu/gphash-server -t 8 -m 1024 -c 4096 --engine cpu"
LOADGEN=$B/cpu/gphash-server-loadgen timeout $(( 580 - ($(date +%s) - t0) )) bash bench/results/2026-12-01-gpu-trap-server-index/srv.sh $out/r/srv.jsonl 2 "start16=$srv" "start22=$srv -o hashpower=22" > $out/r/srv.log 2>&1; echo "server runs rc=$? ($(( $(date +%s) - t0 )) s)"
python3 bench/results/2026-12-01-gpu-trap-server-index/srv_table.py $out/r/srv.jsonl
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
