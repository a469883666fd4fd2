#!/usr/bin/env bash
# srv.sh BUILD OUT.jsonl REPEAT: memcached, gphash-server (LRU interval 60, the default) and
# gphash-server with every hit moving its item (interval 0), -t 8 each, alternating; our load
# generator with 8 threads, 128 connections, one request in flight, 16-byte keys, 100 K keys,
# 1 s warm-up then 4 s timed. Configurations: 32 B gets (95%) uniform; 512 B 50% gets Zipf 0.99.
set -u
B=$1; out=$2; rep=${3:-3}
memcached=$(command -v memcached)
loadgen=$B/gphash-server-loadgen; server=$B/gphash-server
port=22400
stat() { python3 - "$1" <<'PY'
import socket, sys, json
s = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); s.sendall(b"stats\r\n"); b = b""
while not b.endswith(b"END\r\n"): b += s.recv(65536)
d = {p[1]: p[2] for p in (l.split(" ") for l in b.decode().split("\r\n")) if len(p) == 3 and p[0] == "STAT"}
print(json.dumps({k: float(d[k]) for k in ("rusage_user", "rusage_system") if k in d}))
PY
}
for cfg in "32 0.95 uniform" "512 0.5 zipf"; do
  read -r value gets dist <<<"$cfg"
  for r in $(seq $rep); do
    for which in memcached lru60 lru0; do
      port=$((port + 1))
      case $which in
        memcached) $memcached -p $port -l 127.0.0.1 -U 0 -t 8 -m 1024 -c 4096 -u root & pid=$! ;;
        lru60) $server -p $port -t 8 -m 1024 -c 4096 --engine cpu >/dev/null 2>&1 & pid=$! ;;
        lru0) GPHASH_LRU_UPDATE_INTERVAL=0 $server -p $port -t 8 -m 1024 -c 4096 --engine cpu >/dev/null 2>&1 & pid=$! ;;
      esac
      for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
      common="-p $port --threads 8 --connections 128 --depth 1 --keys 100000 --key-size 16 --value-size $value --get-ratio $gets --distribution $dist --multiget 1"
      $loadgen $common --seconds 1 > /dev/null
      before=$(stat $port)
      run=$($loadgen $common --seconds 4)
      after=$(stat $port)
      kill $pid; wait $pid 2>/dev/null
      echo "{\"config\":\"v$value get$gets $dist\",\"server\":\"$which\",\"load\":$run,\"before\":$before,\"after\":$after}" >> $out
      echo "$which v$value $dist: $(echo $run | python3 -c 'import json,sys; j=json.load(sys.stdin); print(round(j["ops_per_s"]), j["p99_us"])')"
    done
  done
done
