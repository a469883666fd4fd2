#!/usr/bin/env bash
# One server run on the 16-core machine: NAME VALUE_SIZE [server args...]. Depth 1, 128 connections,
# 8 loadgen threads, 95% gets uniform, 16-byte keys. Prints ops/s, p99, CPU per request (server,
# loadgen), machine idle share, busiest server threads, gphash's handoffs.
set -u
name=$1; value=$2; shift 2
B=${B:?}; MC=${MC:?}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if [[ $name == mc* ]]; then
  $MC -u root -p $port -t 8 -m 1024 -U 0 -l 127.0.0.1 -c 4096 "$@" > /dev/null 2>&1 & pid=$!
else
  $B/gphash-server -p $port -t 8 -m 1024 -c 4096 "$@" > /dev/null 2> /tmp/srv_$name.err & pid=$!
fi
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
lg=(-p $port --threads 8 --connections 128 --depth ${DEPTH:-1} --keys 100000 --key-size 16 --value-size $value --get-ratio ${GETS:-0.95} --distribution ${DIST:-uniform})
$B/gphash-server-loadgen "${lg[@]}" --seconds 1 > /dev/null 2>&1
snap() { for t in /proc/$pid/task/*; do awk '{print $14+$15}' $t/stat; done | paste -sd' '; }
cpu0=$(snap); read -r _ a b c idle0 iow0 rest < /proc/stat; tot0=$(awk '/^cpu /{s=0; for(i=2;i<=NF;i++) s+=$i; print s}' /proc/stat)
if [[ -n ${PERF:-} ]]; then (sleep 1; LD_LIBRARY_PATH=$PERFB $PERFB/perf record -g -F 1999 -p $pid -o $PERF -- sleep 2 > /dev/null 2>&1) & fi
out=$(python3 -c 'import subprocess,resource,sys,json; r=subprocess.run(sys.argv[1:],capture_output=True,text=True); u=resource.getrusage(resource.RUSAGE_CHILDREN); j=json.loads(r.stdout.strip().splitlines()[-1]); j["lg_cpu"]=u.ru_utime+u.ru_stime; print(json.dumps(j))' $B/gphash-server-loadgen "${lg[@]}" --seconds 4 --no-preload)
cpu1=$(snap); read -r _ a b c idle1 iow1 rest < /proc/stat; tot1=$(awk '/^cpu /{s=0; for(i=2;i<=NF;i++) s+=$i; print s}' /proc/stat)
hand=""; [[ $name != mc* ]] && hand=$(python3 /tmp/stats.py $port gphash_round_handoffs gphash_rounds | awk '{printf "%s=%s ", $2, $3}'); [[ $name != mc* ]] && hand="$hand $(head -c 200 /tmp/srv_$name.err | tr "\n" " ")"
kill $pid; wait $pid 2>/dev/null
python3 - "$name $*" "$out" "$cpu0" "$cpu1" $idle0 $idle1 $tot0 $tot1 "$hand" <<'PY'
import json, sys
name, out, c0, c1 = sys.argv[1:5]; i0, i1, t0, t1 = map(int, sys.argv[5:9]); hand = sys.argv[9]
j = json.loads(out); n = j["ops"]
a = list(map(int, c0.split())); b = list(map(int, c1.split()))
per = sorted(((y - x) / 100 for x, y in zip(a, b)), reverse=True) if len(a) == len(b) else []
srv = sum(per)
print(f"{name:34s} {j['ops_per_s']/1e3:7.0f} K/s p50 {j['p50_us']:6.1f} p99 {j['p99_us']:7.1f} | server {1e6*srv/n:5.2f} us/req "
      f"loadgen {1e6*j['lg_cpu']/n:5.2f} | idle {100*(i1-i0)/(t1-t0):4.1f}% | threads {' '.join(f'{x:.2f}' for x in per[:10])} | {hand}", flush=True)
PY
