#!/usr/bin/env bash
# Session 36, call 4 (call 3's warm machine): the operations test with the GPU index if call 3 had
# no time left for it; then memcached -t 8 against gphash-server -t 8 with the CPU index started
# at 2^16 items (the default) and 2^22 (the old start), and the GPU index at its default start
# (-m / 256 bytes: 2^22) and at 2^16, alternating (srv.sh, two runs each).
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device/gpu
[ -x $B/gphash-server ] || { echo "no build here (a fresh machine)"; exit 1; }
if [ "${RUN_OPS:-0}" = 1 ]; then
  GPHASH_SERVER=$B/gphash-server GPHASH_SERVER_ARGS="--engine gpu" timeout 150 python3 tests/server/operations_test.py > $out/r/operations_gpu.log 2>&1
  echo "operations_test --engine gpu rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "FAIL|grew|passed" $out/r/operations_gpu.log | head -12
fi
srv="$B/gphash-server -t 8 -m 1024 -c 4096"
LOADGEN=$B/gphash-server-loadgen timeout $(( 560 - ($(date +%s) - t0) )) bash bench/results/2026-12-01-gpu-trap-server-index/srv.sh $out/r/srv.jsonl ${REPEAT:-2} \
  "cpu16=$srv --engine cpu" "cpu22=$srv --engine cpu -o hashpower=22" "gpu22=$srv --engine gpu" "gpu16=$srv --engine gpu -o hashpower=16" > $out/r/srv.log 2>&1
echo "server runs rc=$? ($(( $(date +%s) - t0 )) s)"
python3 bench/results/2026-12-01-gpu-trap-server-index/srv_table.py $out/r/srv.jsonl
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
