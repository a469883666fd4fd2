#!/usr/bin/env bash
# Session 30, call 1: connections dealt in turn (main) against the parent's accept (base), and the
# direct path for rounds of gets (direct), alternating with memcached; CPU engine, 16 cores.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
t0=$(date +%s)
for v in base direct; do
  mkdir -p /tmp/$v && tar cf - --exclude=./build-device --exclude=./peers-local --exclude=./build --exclude=./build-cpu . | tar xf - -C /tmp/$v
done
(cd /tmp/base && patch -p1 < $root/peers-local/s30/unhandover.diff) > $out/r/patch.log 2>&1 || { cat $out/r/patch.log; exit 1; }
(cd /tmp/direct && patch -p1 < $root/peers-local/s30/direct.diff) >> $out/r/patch.log 2>&1 || { cat $out/r/patch.log; exit 1; }
bld() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPHASH_CUDA=OFF -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build $2 -j 5 --target gphash-server gphash-server-loadgen; }
bld . $root/build-device/main > $out/r/build-main.log 2>&1 & p1=$!
bld /tmp/base $root/build-device/base > $out/r/build-base.log 2>&1 & p2=$!
bld /tmp/direct $root/build-device/direct > $out/r/build-direct.log 2>&1 & p3=$!
wait $p1 || { tail -30 $out/r/build-main.log; exit 1; }; wait $p2 || { tail -30 $out/r/build-base.log; exit 1; }
wait $p3 || { tail -30 $out/r/build-direct.log; exit 1; }
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
S=peers-local/s30/srv16.sh
M=$root/build-device/main; BA=$root/build-device/base; D=$root/build-device/direct
{
for rep in 1 2 3; do
  B=$M bash $S mc 32; B=$BA bash $S g-base 32; B=$M bash $S g-main 32; B=$D bash $S g-direct 32
done
export GETS=0.5 DIST=zipf
for rep in 1 2; do
  B=$M bash $S mc-z 512; B=$BA bash $S g-base-z 512; B=$M bash $S g-main-z 512; B=$D bash $S g-direct-z 512
done
export GETS=0.95 DIST=uniform DEPTH=4
for rep in 1 2; do
  B=$M bash $S mc-d4 32; B=$M bash $S g-main-d4 32; B=$D bash $S g-direct-d4 32
done
} 2>&1 | tee $out/r/runs.log
echo "==== done $(( $(date +%s) - t0 )) s"
