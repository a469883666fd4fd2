#!/usr/bin/env bash
# Session 31, call 4: gphash-server with --io-uring (a loop pass's recvs, and its sends, one
# io_uring_enter each) against the same binary without it and memcached, alternating; CPU engine,
# 16 cores, depth 1 (and 4).
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
t0=$(date +%s)
M=$root/build-device/main
( cmake -S . -B $M -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPHASH_CUDA=OFF -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build $M -j 16 --target gphash-server gphash-server-loadgen ) > $out/r/build.log 2>&1 || { tail -30 $out/r/build.log; exit 1; }
grep -i uring $out/r/build.log | head -3
echo "build: $(( $(date +%s) - t0 )) s"
deps=/tmp/gphash-deps; mkdir -p $deps; for f in .deps/*.deb; do dpkg -x "$f" $deps; done
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export MC=$deps/usr/bin/memcached
ldd $M/gphash-server | grep uring
cat > /tmp/stats.py <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n"); buf=b""
while not buf.endswith(b"END\r\n"): buf += s.recv(65536)
for l in buf.decode().split("\r\n"):
    if any(k in l for k in sys.argv[2:]): print(l)
PY
S=peers-local/s31/srv16.sh
export B=$M
{
for rep in 1 2 3 4; do
  bash $S mc 32; bash $S g-plain 32; bash $S g-uring 32 --io-uring
done
export GETS=0.5 DIST=zipf
for rep in 1 2; do
  bash $S mc-z 512; bash $S g-plain-z 512; bash $S g-uring-z 512 --io-uring
done
export GETS=0.95 DIST=uniform DEPTH=4
bash $S mc-d4 32; bash $S g-plain-d4 32; bash $S g-uring-d4 32 --io-uring
} 2>&1 | tee $out/r/runs.log
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
