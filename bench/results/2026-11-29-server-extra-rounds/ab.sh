#!/bin/bash
# usage: SERVERS=dir CONNS=8 ab.sh "32 0.95 uniform 1" base new   (value bytes, get ratio, distribution, multi-get)
# alternating A/B of two gphash-server binaries on one configuration; prints ops/s, p50, p99 (us)
B=${GPHASH_BUILD_DIR:-build-cpu}   # for the load generator; the two servers: $SERVERS/gphash-server-<name>
cfg=$1; shift   # "32 0.95 uniform 1"
read -r value gets dist mget <<<"$cfg"
for round in 1 2 3 4 5 6; do
  for v in "$@"; do
    port=$((23000 + RANDOM % 2000))
    ${SERVERS:-.}/gphash-server-$v -p $port -t 2 -m 1024 -c 4096 --engine cpu >/dev/null 2>&1 & pid=$!
    for i in $(seq 50); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
    out=$($B/gphash-server-loadgen -p $port --threads 2 --connections ${CONNS:-8} --depth 1 --seconds 3 --keys 100000 --key-size 16 --value-size $value --get-ratio $gets --distribution $dist --multiget $mget)
    kill $pid; wait $pid 2>/dev/null
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print("%-16s %10.0f %8.1f %8.1f" % (sys.argv[2], j["ops_per_s"], j["p50_us"], j["p99_us"]))' "$out" "$v"
  done
done
