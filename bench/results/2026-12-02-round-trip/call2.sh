#!/usr/bin/env bash
# Session 41: small host batches read and write mapped pinned memory in place (this tree's
# default) against the copies in and out of before (GPHASH_STAGED_COPIES=1, a temporary switch),
# alternating in one build: gpu_bench --sections small, the GPU suite, gphash-server's GPU index
# beside memcached (srv.sh). Resumable: a job done (marker under the build dir) is skipped, and no
# job starts after DEADLINE seconds, so a second call on the warm machine runs the rest.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s); deadline=${DEADLINE:-520}
B=$root/build-device/main; done_dir=$root/build-device/done; mkdir -p $done_dir
if [ ! -f $done_dir/build ]; then
  ( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B -j 16 ) > $out/r/build.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
  touch $done_dir/build; echo "build: $(( $(date +%s) - t0 )) s"
fi
left() { echo $(( deadline - ($(date +%s) - t0) )); }
small() { local name=$1 copies=$2
  [ -f $done_dir/$name ] && return
  [ $(left) -lt 30 ] && { echo "later: $name"; return; }
  local s=$(date +%s)
  GPHASH_STAGED_COPIES=$copies timeout 120 $B/bench/gpu_bench --sections small --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name rc=$? ($(( $(date +%s) - s )) s)"; touch $done_dir/$name; }
small small_new1 0
small small_old1 1
small small_new2 0
small small_old2 1
if [ ! -f $done_dir/suite ] && [ $(left) -gt 150 ]; then
  s=$(date +%s)
  (cd $B && ctest -L gpu -E "GpuMemoryFaults|gpu_contention" -j 14 --timeout 300 > $out/r/gpu_suite.log 2>&1); echo "gpu suite rc=$? $(grep -E 'tests passed|tests failed' $out/r/gpu_suite.log) ($(( $(date +%s) - s )) s)"
  grep -A20 "tests failed" $out/r/gpu_suite.log | head -20; touch $done_dir/suite
fi
if [ ! -f $done_dir/srv ] && [ $(left) -gt 150 ]; then
  srv="$B/gphash-server -t 8 -m 1024 -c 4096 --engine gpu"
  LOADGEN=$B/gphash-server-loadgen timeout $(( $(left) - 5 )) bash bench/results/2026-12-01-gpu-trap-server-index/srv.sh $out/r/srv.jsonl 2 \
    "gpu_mapped=$srv" "gpu_copies=env GPHASH_STAGED_COPIES=1 $srv" > $out/r/srv.log 2>&1; echo "server runs rc=$?"
  python3 bench/results/2026-12-01-gpu-trap-server-index/srv_table.py $out/r/srv.jsonl; touch $done_dir/srv
fi
for f in $out/r/small_*.log; do [ -f "$f" ] && { echo "== $f"; grep -E "small \(|floor" $f | sed 's/ M ops.s at p50//'; }; done
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
