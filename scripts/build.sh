#!/usr/bin/env bash
# Configures and builds every target into build/ (Release). CUDA targets are built when nvcc is
# found (on PATH or in /usr/local/cuda/bin); pass -DGPHASH_CUDA=OFF in GPHASH_CMAKE_ARGS to skip.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GPHASH_BUILD_DIR:-$root/build}
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${GPHASH_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)"
