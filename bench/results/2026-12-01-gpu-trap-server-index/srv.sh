#!/usr/bin/env bash
# srv.sh OUT.jsonl REPEAT VARIANT...: memcached -t 8 and each VARIANT ("name=command line of a
# gphash-server without -p"), alternating; our load generator (LOADGEN) with 8 threads, 128
# connections, one request in flight, 16-byte keys, 100 K keys, 1 s warm-up then 4 s timed.
# Configurations: 32 B gets (95%) uniform; 512 B 50% gets Zipf 0.99; 512 B gets uniform.
set -u
out=$1; rep=$2; shift 2
memcached=$(command -v memcached)
port=22400
stat() { python3 - "$1" <<'PY'
import socket, sys, json
s = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); s.sendall(b"stats\r\n"); b = b""
while not b.endswith(b"END\r\n"): b += s.recv(65536)
d = {p[1]: p[2] for p in (l.split(" ") for l in b.decode().split("\r\n")) if len(p) == 3 and p[0] == "STAT"}
print(json.dumps({k: float(d[k]) for k in ("rusage_user", "rusage_system") if k in d}))
PY
}
for cfg in "32 0.95 uniform" "512 0.5 zipf" "512 0.95 uniform"; do
  read -r value gets dist <<<"$cfg"
  for r in $(seq $rep); do
    for variant in "memcached=$memcached -l 127.0.0.1 -U 0 -t 8 -m 1024 -c 4096 -u root" "$@"; do
      name=${variant%%=*}; cmd=${variant#*=}
      port=$((port + 1))
      $cmd -p $port >/dev/null 2>&1 & pid=$!
      for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
      common="-p $port --threads 8 --connections 128 --depth 1 --keys 100000 --key-size 16 --value-size $value --get-ratio $gets --distribution $dist --multiget 1"
      $LOADGEN $common --seconds 1 > /dev/null
      before=$(stat $port)
      run=$($LOADGEN $common --seconds 4)
      after=$(stat $port)
      kill $pid; wait $pid 2>/dev/null
      echo "{\"config\":\"v$value get$gets $dist\",\"server\":\"$name\",\"load\":$run,\"before\":$before,\"after\":$after}" >> $out
      echo "$name v$value get$gets $dist: $(echo $run | python3 -c 'import json,sys; j=json.load(sys.stdin); print(round(j["ops_per_s"]), j["p99_us"])')"
    done
  done
done
