#!/usr/bin/env bash
# Session 22, call 2: where A's batch_kernel at 2^16 (host-mapped, complete cache) spends its time:
# ncu source counters (build with -lineinfo), and the serial runs split off (GPHASH_AB_FENCE bit 8).
set -u
root=$PWD; out=$OUT; mkdir -p $out/r
cmake_args=()
source scripts/offline_deps.sh; offline_deps "$root"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
t0=$(date +%s)
B=$root/build-device
( cmake -S . -B $B/main -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_FLAGS=-lineinfo -DGPHASH_REQUIRE_CUDA=ON "${cmake_args[@]}" && cmake --build $B/main -j 16 --target gpu_bench ) > $out/r/build-main.log 2>&1 || { grep -B2 -A10 -m5 error $out/r/build-main.log | head -60; tar czf $out/r.tgz -C $out r; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
NEW=$B/main/bench/gpu_bench
mapped="--sections gpu-batches --placement mapped --ycsb-records 16777216 --capacity 16777216 --ycsb-key-width 32 --ycsb-value-width 32 --cache lfu --cache-fraction 1.0"
run() {  # run NAME MODE ARGS...
  local name=$1 mode=$2; shift 2
  local s=$(date +%s)
  GPHASH_AB_FENCE=$mode timeout 90 $NEW "$@" --json $out/r/$name.json > $out/r/$name.log 2>&1
  echo "$name ($(( $(date +%s) - s )) s) rc=$?"
}
run m16_f8 8 $mapped --workloads load,c,b,a,b,a --ycsb-batch 65536
run m16_f0 0 $mapped --workloads load,c,b,a,b,a --ycsb-batch 65536
NCU="ncu --clock-control none --cache-control none --profile-from-start off"
t1=$(date +%s)
GPHASH_AB_FENCE=8 timeout 100 $NCU --metrics gpu__time_duration.sum --print-summary per-kernel $NEW $mapped --workloads load,b,a --operations 4194304 --profile-workload 2 --ycsb-batch 65536 > $out/r/ncu_a16_f8.log 2>&1; echo "ncu a16 f8 rc=$? $(( $(date +%s) - t1 )) s"
t1=$(date +%s)
timeout 150 $NCU --section SourceCounters --section WarpStateStats --import-source yes --kernel-name regex:batch_kernel --launch-skip 20 --launch-count 1 -o $out/r/a16 $NEW $mapped --workloads load,b,a --operations 4194304 --profile-workload 2 --ycsb-batch 65536 > $out/r/ncu_a16_src.log 2>&1; echo "ncu a16 src rc=$? $(( $(date +%s) - t1 )) s"
ncu -i $out/r/a16.ncu-rep --page source --csv --print-source sass > $out/r/a16_sass.csv 2> $out/r/a16_sass.err; echo "sass csv rc=$? $(wc -l < $out/r/a16_sass.csv) lines"
ncu -i $out/r/a16.ncu-rep --page source --csv --print-source cuda > $out/r/a16_cuda.csv 2> $out/r/a16_cuda.err; echo "cuda csv rc=$? $(wc -l < $out/r/a16_cuda.csv) lines"
ncu -i $out/r/a16.ncu-rep --page details --print-details all > $out/r/a16_details.txt 2>&1
tar czf $out/r.tgz -C $out r
echo "==== summary"
python3 - $out/r/ncu_a16_f8.log <<'PY'
import re,sys
name=None
for line in open(sys.argv[1]):
    m=re.match(r'\s+(?:void )?(?:gphash::)?(?:engine::gpu::)?([A-Za-z_0-9:]+).*Invocations (\d+)',line)
    if m: name=(m.group(1),m.group(2))
    if 'gpu__time_duration.sum' in line and name:
        print(name[0][:60], 'x'+name[1], line.split()[-1], 'us avg'); name=None
PY
head -c 600 $out/r/a16_cuda.csv; echo; head -3 $out/r/a16_sass.err $out/r/a16_cuda.err
for f in $out/r/m16*.json; do python3 - "$f" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))["gpu_batches"]
name=sys.argv[1].split('/')[-1][:-5]
print(name, " ".join(f'{r["workload"]}:{r.get("device_ops_per_second",0)/1e6:.0f}/{r["ops_per_second"]/1e6:.0f}' for r in d["results"]))
PY
done
