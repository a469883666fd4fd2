#!/usr/bin/env bash
# For the next session (not run: this session's device time was spent): do random 8-byte stores
# into registered host memory slow down with the region's size as reads do (DESIGN.md section 2)?
# If stores into 128-512 MiB run several times faster than into 1-2 GiB, value words kept apart
# from the keys (about 200 MB for 16.8 M items) would take YCSB A at 2^16 past its translation
# bound. About a minute of device time, no CMake build.
set -u
export PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -std=c++17 -arch=sm_90 bench/host_pages_bench.cu -o /tmp/hpb || exit 1
timeout 300 /tmp/hpb --kinds shm --sizes 128,256,512,1024,2048 --granules 8,32 \
  --patterns random,sorted:32768 --readers st,st-fence,ilp1 --json $OUT/hpb.json 2>&1 | grep -v "not measured" | tee $OUT/hpb.txt
