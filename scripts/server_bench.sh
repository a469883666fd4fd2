#!/usr/bin/env bash
# gphash-server beside memcached, same machine, same load generator (gphash-server-loadgen:
# closed loop, every connection keeps DEPTH requests in flight), same number of server threads.
# The matrix: 16-byte keys; 32- and 512-byte values; 95% and 50% gets; uniform and Zipf 0.99
# keys; multi-gets of 1 and 100 keys. For each: throughput (key operations per second), p50 and
# p99 latency per request, each server's CPU time per request (its `stats` rusage), and for
# gphash-server where its time goes (read, parse, index, resolve, reply, write: from its stats).
# With an NVIDIA GPU, NVML's power reading gives operations per watt.
#
#   scripts/server_bench.sh                       # builds build/ first if the binaries are not there
#   ENGINE=gpu SERVER_THREADS=8 LOADGEN_THREADS=8 CONNECTIONS=128 RUN_SECONDS=10 scripts/server_bench.sh
#
# Environment (all optional): GPHASH_SERVER, LOADGEN, MEMCACHED (paths: the GPU machine is
# offline, memcached may come from an unpacked .deb), ENGINE (cpu|gpu), SERVER_THREADS (-t for
# both servers, default 2), LOADGEN_THREADS (default 2), CONNECTIONS (default 32), DEPTH (default
# 1), RUN_SECONDS (per run, default 3), KEYS (default 100000), MEMORY_MB (default 1024), OUT (JSON,
# default results/server_bench.json), QUICK=1 (4 configurations instead of 16), EXTRA_ARGS
# (more gphash-server options, e.g. "--batch-period-us 50"), REPEAT (runs of each pair, default 1:
# the table shows medians; memcached and gphash-server alternate, so drifting background load
# hits both alike).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GPHASH_BUILD_DIR:-$root/build}
server=${GPHASH_SERVER:-$build/gphash-server}
loadgen=${LOADGEN:-$build/gphash-server-loadgen}
if [[ ! -x $server || ! -x $loadgen ]]; then
  GPHASH_BUILD_DIR=$build "$root/scripts/build.sh" >/dev/null
fi
# An offline GPU machine: memcached (with libevent, libsasl2) from Debian packages brought in
# .deps/ (../shared/offline-deps/fetch-deps.sh memcached libevent-2.1-7 libsasl2-2 libsasl2-modules-db).
if [[ -z ${MEMCACHED:-} ]] && ! command -v memcached >/dev/null && ls "$root"/.deps/memcached_*.deb >/dev/null 2>&1; then
  deps=/tmp/gphash-deps
  mkdir -p "$deps"
  for f in "$root"/.deps/*.deb; do dpkg -x "$f" "$deps"; done
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  MEMCACHED=$deps/usr/bin/memcached
fi
memcached=${MEMCACHED:-memcached}
engine=${ENGINE:-cpu}
threads=${SERVER_THREADS:-2}
lthreads=${LOADGEN_THREADS:-2}
conns=${CONNECTIONS:-32}
depth=${DEPTH:-1}
seconds=${RUN_SECONDS:-3}
keys=${KEYS:-100000}
memory=${MEMORY_MB:-1024}
out=${OUT:-$root/results/server_bench.json}
mkdir -p "$(dirname "$out")"
command -v "$memcached" >/dev/null || { echo "server_bench.sh: memcached not found (set MEMCACHED)" >&2; exit 2; }
nvml=()
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then nvml=(--nvml); fi

free_port() { /usr/bin/env python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "server_bench.sh: nothing listens on $1" >&2
  return 1
}
stats_of() {  # the gphash_* and rusage lines of `stats` as JSON
  /usr/bin/env python3 - "$1" <<'PY'
import json, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    buf += s.recv(65536)
out = {}
for line in buf.decode().split("\r\n"):
    p = line.split(" ")
    if len(p) == 3 and p[0] == "STAT" and (p[1].startswith("gphash_") or p[1].startswith("rusage")):
        try:
            out[p[1]] = float(p[2])
        except ValueError:
            out[p[1]] = p[2]
print(json.dumps(out))
PY
}

configs=()
for value in 32 512; do
  for gets in 0.95 0.5; do
    for dist in uniform zipf; do
      for mget in 1 100; do
        configs+=("$value $gets $dist $mget")
      done
    done
  done
done
[[ ${QUICK:-0} == 1 ]] && configs=("32 0.95 uniform 1" "512 0.5 zipf 1" "32 0.95 zipf 100" "512 0.95 uniform 1")

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

results=$(mktemp)
echo "server_bench.sh: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); server threads $threads, engine $engine; loadgen $lthreads threads x $conns connections, depth $depth, ${seconds}s per run"
printf '%-34s %-10s %12s %9s %9s\n' "configuration" "server" "ops/s" "p50 us" "p99 us"
for cfg in "${configs[@]}"; do
  read -r value gets dist mget <<<"$cfg"
  for rep in $(seq "${REPEAT:-1}"); do
  for which in memcached gphash; do
    port=$(free_port)
    if [[ $which == memcached ]]; then
      args=(-p "$port" -l 127.0.0.1 -U 0 -t "$threads" -m "$memory" -c 4096)
      [[ $(id -u) == 0 ]] && args+=(-u root)
      "$memcached" "${args[@]}" & pid=$!
    else
      "$server" -p "$port" -t "$threads" -m "$memory" -c 4096 --engine "$engine" ${EXTRA_ARGS:-} >/dev/null 2>&1 & pid=$!
    fi
    pids+=("$pid")
    wait_port "$port"
    run=$("$loadgen" -p "$port" --threads "$lthreads" --connections "$conns" --depth "$depth" --seconds "$seconds" \
          --keys "$keys" --key-size 16 --value-size "$value" --get-ratio "$gets" --distribution "$dist" --multiget "$mget" "${nvml[@]}")
    extra=$(stats_of "$port")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "{\"config\":\"v$value get$gets $dist mget$mget\",\"server\":\"$which\",\"engine\":\"$engine\",\"server_threads\":$threads,\"load\":$run,\"stats\":$extra}" >>"$results"
    /usr/bin/env python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print("%-34s %-10s %12.0f %9.1f %9.1f" % (sys.argv[2], sys.argv[3], j["ops_per_s"], j["p50_us"], j["p99_us"]) + ("  %.0f ops/W" % j["ops_per_gpu_watt"] if "ops_per_gpu_watt" in j else ""))' \
      "$run" "v$value get$gets $dist mget$mget" "$which"
  done
  done
done

/usr/bin/env python3 - "$results" "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
# Where gphash-server's time goes, per key operation, summed over its runs.
breakdown = {}
ops = 0
for r in rows:
    if r["server"] != "gphash":
        continue
    ops += r["load"]["ops"]
    for k in ("read", "parse", "index", "resolve", "reply", "write", "batch_wait"):
        breakdown[k] = breakdown.get(k, 0) + r["stats"].get(f"gphash_seconds_{k}", 0)
summary = {k: v / ops * 1e9 for k, v in breakdown.items()} if ops else {}
json.dump({"runs": rows, "gphash_ns_per_op": summary}, open(sys.argv[2], "w"), indent=1)
if summary:
    print("gphash-server, ns per key operation (threads summed): " + ", ".join(f"{k} {v:.0f}" for k, v in summary.items()))
# Medians per configuration and server.
from statistics import median
table = {}
for r in rows:
    # The server's CPU time (all its threads, user + system, the load generator's preload included)
    # per request: at one request in flight both servers' threads are busy, and this is what sets
    # their throughput.
    st = r["stats"]
    r["load"]["cpu_us_per_request"] = 1e6 * (float(st.get("rusage_user", 0)) + float(st.get("rusage_system", 0))) / max(r["load"]["requests"], 1)
    table.setdefault(r["config"], {}).setdefault(r["server"], []).append(r["load"])
medians = {}
print(f"\nmedians of {max(len(v) for t in table.values() for v in t.values())} run(s):")
print("%-34s %12s %9s %9s   %12s %9s %9s   %6s   %s" % ("configuration", "memcached", "p50", "p99", "gphash", "p50", "p99", "ratio", "CPU us/request (memcached, gphash)"))
for cfg, t in table.items():
    m = {s: {k: median(x[k] for x in runs) for k in ("ops_per_s", "p50_us", "p99_us", "cpu_us_per_request")} for s, runs in t.items()}
    medians[cfg] = m
    if "memcached" in m and "gphash" in m:
        a, b = m["memcached"], m["gphash"]
        print("%-34s %12.0f %9.1f %9.1f   %12.0f %9.1f %9.1f   %6.2f   %5.2f %5.2f" % (cfg, a["ops_per_s"], a["p50_us"], a["p99_us"],
              b["ops_per_s"], b["p50_us"], b["p99_us"], b["ops_per_s"] / a["ops_per_s"], a["cpu_us_per_request"], b["cpu_us_per_request"]))
ratios = [m["gphash"]["ops_per_s"] / m["memcached"]["ops_per_s"] for m in medians.values() if "gphash" in m and "memcached" in m]
if ratios:
    print(f"gphash/memcached throughput (medians): min {min(ratios):.2f}, max {max(ratios):.2f}; gphash p99 <= 1 ms in "
          f"{sum(1 for m in medians.values() if m.get('gphash', {}).get('p99_us', 1e9) <= 1000)}/{len(ratios)} configurations")
out = json.load(open(sys.argv[2]))
out["medians"] = medians
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(f"wrote {sys.argv[2]}")
PY
rm -f "$results"
