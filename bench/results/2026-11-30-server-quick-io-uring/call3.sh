#!/usr/bin/env bash
# Session 32, call 3: gphash-server with the GPU index at one request in flight: how its threads
# wait for the GPU (GPHASH_GPU_WAIT=spin|yield|block -> cudaSetDeviceFlags), alternating with
# memcached, 16 cores, 8 threads, 128 connections.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
M=$root/build-device/main
( cmake -S . -B $M -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DGPHASH_REQUIRE_CUDA=ON -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build $M -j 16 --target gphash-server gphash-server-loadgen ) > $out/r/build.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build.log | head -40; exit 1; }
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
S=peers-local/s32/srv16.sh
export B=$M
g() { local w=$1; shift; GPHASH_GPU_WAIT=$w bash $S "$@" --engine gpu; }
{
for rep in 1 2; do
  bash $S mc 32; g spin g-spin 32; g yield g-yield 32; g block g-block 32
done
export GETS=0.5 DIST=zipf
bash $S mc-z 512; g spin g-spin-z 512; g yield g-yield-z 512; g block g-block-z 512
export GETS=0.95 DIST=uniform DEPTH=4
bash $S mc-d4 32; g spin g-spin-d4 32; g yield g-yield-d4 32; g block g-block-d4 32
} 2>&1 | tee $out/r/runs.log
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
