#!/usr/bin/env bash
# Session 29, call 6: hits mark their item instead of moving it up the LRU (lru.diff), against the
# parent; memcached alternating; CPU engine, one request in flight, 16 cores.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
t0=$(date +%s)
mkdir -p /tmp/base && tar cf - --exclude=./build-device --exclude=./peers-local --exclude=./build --exclude=./build-cpu . | tar xf - -C /tmp/base
(cd /tmp/base && patch -R -p1 < $root/peers-local/lru.diff) > $out/r/patch.log 2>&1 || { cat $out/r/patch.log; exit 1; }
bld() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPHASH_CUDA=OFF -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build $2 -j 8 --target gphash-server gphash-server-loadgen; }
bld . $root/build-device/new > $out/r/build-new.log 2>&1 & p1=$!
bld /tmp/base $root/build-device/base > $out/r/build-base.log 2>&1 & p2=$!
wait $p1 || { tail -30 $out/r/build-new.log; exit 1; }; wait $p2 || { tail -30 $out/r/build-base.log; exit 1; }
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
NEW=$root/build-device/new BASE=$root/build-device/base
{
for rep in 1 2 3; do
  B=$NEW bash $S mc 32; B=$BASE bash $S g-base 32; B=$NEW bash $S g-new 32
done
export GETS=0.5 DIST=zipf
for rep in 1 2; do
  B=$NEW bash $S mc-z 512; B=$BASE bash $S g-base-z 512; B=$NEW bash $S g-new-z 512
done
} 2>&1 | tee $out/r/runs.log
echo "==== done $(( $(date +%s) - t0 )) s"
