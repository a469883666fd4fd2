#!/usr/bin/env bash
# Session 29, call 5: --round-runner home (a partition's rounds on one worker) against any (the
# default), memcached alternating; CPU engine, one request in flight, 16 cores.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
t0=$(date +%s)
export B=$root/build-device/cpu
( cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPHASH_CUDA=OFF -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF "${cmake_args[@]}" \
  && cmake --build $B -j 16 --target gphash-server gphash-server-loadgen ) > $out/r/build.log 2>&1 || { tail -30 $out/r/build.log; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
deps=/tmp/gphash-deps; mkdir -p $deps; for f in .deps/*.deb; do dpkg -x "$f" $deps; done
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export MC=$deps/usr/bin/memcached
cat > /tmp/stats.py <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n"); buf=b""
while not buf.endswith(b"END\r\n"): buf += s.recv(65536)
for l in buf.decode().split("\r\n"):
    if any(k in l for k in sys.argv[2:]): print(l)
PY
S=peers-local/srv16.sh
{
for rep in 1 2 3; do
  bash $S mc 32; bash $S g-any 32 --round-runner any; bash $S g-home 32 --round-runner home; bash $S g-home16 32 --round-runner home --partitions 16
done
for rep in 1 2; do
  bash $S mc 512; bash $S g-any 512 --round-runner any; bash $S g-home 512 --round-runner home
done
export GETS=0.5 DIST=zipf
bash $S mc-z 512; bash $S g-any-z 512 --round-runner any; bash $S g-home-z 512 --round-runner home
} 2>&1 | tee $out/r/runs.log
echo "==== done $(( $(date +%s) - t0 )) s"
