#!/usr/bin/env bash
# Session 29, call 2: gphash-server (CPU engine) at one request in flight on 16 cores: where the CPU
# goes, server vs memcached, and partitions / receiver rounds. CPU-only build.
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
for rep in 1 2; do
  bash $S mc 32
  bash $S g 32
  bash $S g 32 --partitions 16
  bash $S g 32 --partitions 32
  bash $S g 32 --partitions 64
  bash $S g 32 --receiver-rounds 0
  bash $S g 32 --receiver-rounds 16
done
bash $S mc 512; bash $S g 512; bash $S g 512 --partitions 32
bash $S mc 512; bash $S g 512; bash $S g 512 --partitions 32
} 2>&1 | tee $out/r/runs.log
nproc; grep -m1 "model name" /proc/cpuinfo
echo "==== done $(( $(date +%s) - t0 )) s"
