#!/usr/bin/env bash
# Sharded tables on a GPU machine (issue 13), in one command: builds (build-device/main, as
# gpu_check.sh), runs the sharding tests on the GPU (gpu_shard_test: 2 to 4 shards on GPU 0), then
# `gphash bench` with the GPU engine on YCSB load, A and C for 1 shard and for more, and prints a
# table of throughput by shard count last. Logs and JSON go to $GPHASH_OUT (default:
# build-device/out).
#
#   scripts/shard_check.sh            # shard lists: "0" "0,0" on one GPU; "0" "0,1" ... on several
#   GPHASH_SHARD_LISTS="0 0,1 0,1,2,3" GPHASH_RECORDS=20000000 scripts/shard_check.sh
#
# On one GPU, "0,0" (two shards on GPU 0) only proves that the sharded path runs there: it is no
# measure of scaling. Scaling is 1 GPU ("0") against 2 ("0,1"); the goal is 1.8x (issue 13).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
builds=$root/build-device
out=${GPHASH_OUT:-$builds/out}
mkdir -p "$builds" "$out"
source "$root/scripts/offline_deps.sh"
offline_deps "$root" || "$root/scripts/deps.sh"
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi
status=0
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$out/shard_gpus.txt"
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
if [[ -z ${GPHASH_SHARD_LISTS:-} ]]; then
  if ((gpus >= 2)); then
    GPHASH_SHARD_LISTS="0"
    list=0
    for ((g = 1; g < gpus; ++g)); do list+=",$g"; GPHASH_SHARD_LISTS+=" $list"; done
  else
    GPHASH_SHARD_LISTS="0 0,0"
  fi
fi
main=$builds/main
t0=$(date +%s)
{ cmake -S "$root" -B "$main" -G Ninja -DCMAKE_BUILD_TYPE=Release &&
  cmake --build "$main" -j "$(nproc)" --target gpu_shard_test shard_test gphash; } >"$out/build-shards.log" 2>&1 ||
  { grep -B2 -A12 -m3 -E "error|Error" "$out/build-shards.log" | head -40; echo "shard_check: BUILD FAILED"; exit 1; }
echo "build: $(($(date +%s) - t0)) s"
"$main/tests/gpu_shard_test" >"$out/gpu_shard_test.log" 2>&1 || status=1
"$main/tests/shard_test" >"$out/shard_test.log" 2>&1 || status=1
records=${GPHASH_RECORDS:-10000000}
for devices in $GPHASH_SHARD_LISTS; do
  tag=${devices//,/-}
  "$main/gphash" bench --engine gpu --devices "$devices" --records "$records" --workloads load,a,c \
    --batch "${GPHASH_BATCH:-1048576}" --pool "gphash-bench-shards-$tag" --no-progress \
    --json "$out/shards_$tag.json" >"$out/shards_$tag.log" 2>&1 || status=1
  rm -f /dev/shm/gphash-bench-shards-"$tag".shard*
done

echo "==== summary"
grep -E "PASSED|FAILED|SKIPPED" "$out/gpu_shard_test.log" | sed 's/^/gpu_shard_test: /' | head -5
grep -E "PASSED|FAILED" "$out/shard_test.log" | sed 's/^/shard_test: /' | head -3
for devices in $GPHASH_SHARD_LISTS; do
  tag=${devices//,/-}
  sed -n '/^workload/,/^$/p' "$out/shards_$tag.log" | sed "s/^/devices $devices: /"
done
exit $status
