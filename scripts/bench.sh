#!/usr/bin/env bash
# The main job: installs what is missing, builds, creates a pool in /dev/shm, loads a YCSB data
# set, runs YCSB A, B and C, prints the results and where the pool is. On a machine with a GPU it
# then does the same with the GPU engine. Extra arguments go to `gphash bench` (see --help),
# for example: scripts/bench.sh --records 1000000 --key-width 32 --value-width 128
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh" >/dev/null
gphash=${GPHASH_BUILD_DIR:-$root/build}/gphash
"$gphash" bench --json "${GPHASH_BUILD_DIR:-$root/build}/bench-cpu.json" "$@"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo
  "$gphash" bench --engine gpu --pool gphash-bench-gpu --json "${GPHASH_BUILD_DIR:-$root/build}/bench-gpu.json" "$@"
fi
