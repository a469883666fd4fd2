#!/usr/bin/env bash
# Sharded tables on a GPU machine (issue 13), in one command: builds (build-device/main, with the
# Python extension when the interpreter has nanobind), runs the sharding tests on the GPUs
# (gpu_shard_test: several shards on GPU 0, and with two GPUs shards on both and batches homed on
# either), then measures 1 GPU against several:
#   ycsb       gpu_bench's gpu-batches (batches start and end in GPU memory, routed on GPU 0, peer
#              copies to the other GPUs): YCSB LOAD, A and C, the pool host-mapped and in GPU memory;
#   embedding  gphash.distributed over torch.distributed, one rank per GPU (NCCL), every row checked;
#   host       (not by default) `gphash bench`: batches in host memory, routed on the host.
# and prints a table of throughput by GPU list last. Logs and JSON go to $GPHASH_OUT (default:
# build-device/out).
#
#   scripts/shard_check.sh                                  # every phase
#   GPHASH_SHARD_PHASES="build tests ycsb" scripts/shard_check.sh
#   GPHASH_SHARD_LISTS="0 0,1" GPHASH_RECORDS=16777216 scripts/shard_check.sh
#
# On one GPU the lists are "0" and "0,0": two shards on GPU 0 prove that the sharded path runs
# there and measure its cost, not scaling. Scaling is 1 GPU ("0") against 2 ("0,1"); the goal is
# 1.8x (issue 13).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
builds=$root/build-device
out=${GPHASH_OUT:-$builds/out}
mkdir -p "$builds" "$out"
py=${PYTHON:-python3}
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
source "$root/scripts/offline_deps.sh"
offline_deps "$root" || "$root/scripts/deps.sh"
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi
phases=" ${GPHASH_SHARD_PHASES:-build tests ycsb embedding} "
has() { [[ $phases == *" $1 "* ]]; }
status=0
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$out/shard_gpus.txt"
nvidia-smi topo -m >"$out/shard_topology.txt" 2>&1
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
main=${GPHASH_SHARD_BUILD:-$builds/main}  # another build folder: leave "build" out of the phases
targets=(gpu_shard_test shard_test gphash gpu_bench)
if "$py" -c "import nanobind, torch" 2>/dev/null &&
   [[ -f $("$py" -c "import sysconfig; print(sysconfig.get_paths()['include'])")/Python.h ]]; then
  cmake_args+=(-DGPHASH_PYTHON=ON -DPython_EXECUTABLE="$(command -v "$py")")
  targets+=(_gphash)
fi
if has build; then
  t0=$(date +%s)
  { cmake -S "$root" -B "$main" "${cmake_args[@]}" -DGPHASH_REQUIRE_CUDA=ON &&
    cmake --build "$main" -j "$(nproc)" --target "${targets[@]}"; } >"$out/build-shards.log" 2>&1 ||
    { grep -B2 -A12 -m3 -E "error|Error" "$out/build-shards.log" | head -40; echo "shard_check: BUILD FAILED"; exit 1; }
  echo "build: $(($(date +%s) - t0)) s"
fi
if has tests; then
  t0=$(date +%s)
  "$main/tests/gpu_shard_test" >"$out/gpu_shard_test.log" 2>&1 || status=1
  if [[ -x $main/tests/shard_test ]]; then "$main/tests/shard_test" >"$out/shard_test.log" 2>&1 || status=1; fi
  echo "tests: $(($(date +%s) - t0)) s"
fi
records=${GPHASH_RECORDS:-16777216}
if has ycsb; then
  t0=$(date +%s)
  for placement in ${GPHASH_SHARD_PLACEMENTS:-mapped gpu-memory}; do
    for devices in $GPHASH_SHARD_LISTS; do
      tag=$placement-b${GPHASH_BATCH:-1048576}-${GPHASH_DISTRIBUTION:-zipf}-${devices//,/-}
      # The table is sized for the records (LOAD measures inserts, not resizes); YCSB's Zipf
      # unless GPHASH_DISTRIBUTION says otherwise (uniform).
      "$main/bench/gpu_bench" --sections gpu-batches --engine gpu --placement "$placement" --devices "$devices" \
        --workloads "${GPHASH_WORKLOADS:-load,a,c}" --ycsb-records "$records" --capacity "$records" \
        ${GPHASH_DISTRIBUTION:+--distribution "$GPHASH_DISTRIBUTION"} --operations "${GPHASH_OPERATIONS:-16777216}" \
        --ycsb-key-width 8 --ycsb-value-width "${GPHASH_VALUE_WIDTH:-128}" --ycsb-batch "${GPHASH_BATCH:-1048576}" \
        --json "$out/shards_ycsb_$tag.json" >"$out/shards_ycsb_$tag.log" 2>&1 || status=1
    done
  done
  echo "ycsb: $(($(date +%s) - t0)) s"
fi
if has embedding; then
  t0=$(date +%s)
  if PYTHONPATH="$main/python:${PYTHONPATH:-}" "$py" -c "import torch, gphash.distributed" 2>"$out/shards_embedding.log"; then
    PYTHONPATH="$main/python:${PYTHONPATH:-}" timeout 300 "$py" "$root/python/bench/distributed_embedding_bench.py" \
      --worlds "${GPHASH_WORLDS:-1,$gpus}" --rows "${GPHASH_EMB_ROWS:-8000000}" --dim 64 --json "$out/shards_embedding.json" \
      >"$out/shards_embedding.log" 2>&1 || status=1
  else
    echo "embedding: skipped (gphash's Python package or torch does not import; the build needs nanobind and Python.h)" |
      tee -a "$out/shards_embedding.log"
  fi
  echo "embedding: $(($(date +%s) - t0)) s"
fi
if has host; then
  for devices in $GPHASH_SHARD_LISTS; do
    tag=${devices//,/-}
    "$main/gphash" bench --engine gpu --devices "$devices" --records "$records" --workloads load,a,c \
      --batch "${GPHASH_BATCH:-1048576}" --pool "gphash-bench-shards-$tag" --no-progress \
      --json "$out/shards_host_$tag.json" >"$out/shards_host_$tag.log" 2>&1 || status=1
    rm -f /dev/shm/gphash-bench-shards-"$tag".shard*
  done
fi

echo "==== summary"
if has tests; then
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|NOTE" "$out/gpu_shard_test.log" | sed 's/^/gpu_shard_test: /' | head -8
  [[ -f $out/shard_test.log ]] && grep -E "^\[  (PASSED|FAILED)" "$out/shard_test.log" | sed 's/^/shard_test: /' | head -3
fi
if has ycsb; then
  for f in "$out"/shards_ycsb_*.log; do
    grep -E "gpu-batches|rror" "$f" | sed "s|^|$(basename "$f" .log): |"
  done
fi
has embedding && grep -E "rank\(s\)|rror" "$out/shards_embedding.log" | sed 's/^/embedding: /'
if has host; then
  for devices in $GPHASH_SHARD_LISTS; do
    sed -n '/^workload/,/^$/p' "$out/shards_host_${devices//,/-}.log" | sed "s/^/host batches, devices $devices: /"
  done
fi
exit $status
