#!/usr/bin/env bash
# Session 32, call 5: perf profiles on 16 cores, one request in flight, 32-byte gets: gphash-server
# (CPU engine, io_uring, as landed) and memcached, for where the server's CPU a request goes now.
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
t0=$(date +%s)
M=$root/build-device/cpu
( cmake -S . -B $M -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPHASH_CUDA=OFF -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF "${cmake_args[@]}" && cmake --build $M -j 16 --target gphash-server gphash-server-loadgen ) > $out/r/build.log 2>&1 || { tail -30 $out/r/build.log; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
deps=/tmp/gphash-deps; mkdir -p $deps; for f in .deps/*.deb; do dpkg -x "$f" $deps; done
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export MC=$deps/usr/bin/memcached PERFB=$root/peers-local/perfb B=$M
cat > /tmp/stats.py <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n"); buf=b""
while not buf.endswith(b"END\r\n"): buf += s.recv(65536)
for l in buf.decode().split("\r\n"):
    if any(k in l for k in sys.argv[2:]): print(l)
PY
S=peers-local/s32/srv16.sh
{
PERF=/tmp/mc.data bash $S mc 32
PERF=/tmp/g.data bash $S g 32
} 2>&1 | tee $out/r/runs.log
export LD_LIBRARY_PATH=$PERFB:$LD_LIBRARY_PATH
for w in mc g; do
  $PERFB/perf report -i /tmp/$w.data --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -80 > $out/r/perf_$w.txt
  $PERFB/perf report -i /tmp/$w.data --no-children --sort dso --stdio -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -12 > $out/r/perf_${w}_dso.txt
  $PERFB/perf report -i /tmp/$w.data --no-children --sort sym --stdio -g caller,2,callee --percent-limit 1.5 2>/dev/null | head -600 > $out/r/perf_${w}_callers.txt
done
cat $out/r/perf_mc_dso.txt; echo; cat $out/r/perf_g_dso.txt; echo; head -45 $out/r/perf_g.txt
tar czf $out/r.tgz -C $out r; rm -rf $out/r
echo "==== done $(( $(date +%s) - t0 )) s"
