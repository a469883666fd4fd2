#!/usr/bin/env bash
# The tests: installs what is missing, builds every target (CUDA ones too when nvcc is there) and
# runs the CPU tests; on a machine with a GPU also the GPU tests.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GPHASH_BUILD_DIR:-$root/build}
"$root/scripts/deps.sh"
"$root/scripts/build.sh"
ctest --test-dir "$build" -L cpu --output-on-failure -j "$(nproc)" --timeout 900
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  ctest --test-dir "$build" -L gpu --output-on-failure --timeout 900
else
  echo "test.sh: no GPU here: GPU tests not run (scripts/gpu_check.sh runs them on a GPU machine)"
fi
