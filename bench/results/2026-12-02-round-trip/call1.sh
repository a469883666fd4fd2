#!/usr/bin/env bash
# Call 1: the floor of a small batch's round trip by how its data travel (round_trip_bench), and
# the previous session's next-call.sh (random 8-byte stores into registered host memory by size).
set -u
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O3 -std=c++17 -arch=sm_90 bench/round_trip_bench.cu -o /tmp/rtb || exit 1
/tmp/rtb --calls 2000 2>&1 | tee $OUT/rtb.txt
/tmp/rtb --calls 2000 --region-mib 256 2>&1 | tee -a $OUT/rtb.txt
bash bench/results/2026-12-02-release-fence/next-call.sh
