#!/usr/bin/env bash
# On the GPU machine (offline), in one command: builds the Python extension with CUDA, runs the
# pytest suites with CUDA tensors, the embedding benchmark (gphash's lookup against a CPU gather
# + copy, torch.nn.EmbeddingBag in GPU memory and a naive zero-copy gather; PCIe measured in the
# same run) and the DLRM-like example, and prints a short summary last. Logs and JSON go to
# $GPHASH_OUT (default: build-device/out).
#
#   scripts/embedding_device.sh
#
# Needs Python 3 with torch, numpy and nanobind (cupy for baseline (c)); pytest from .whl/ if the
# interpreter lacks it (pip install --no-index). Debian -dev packages from .deps/ as in gpu_check.sh.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
builds=$root/build-device
out=${GPHASH_OUT:-$builds/out}
mkdir -p "$builds" "$out"
py=${PYTHON:-python3}
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
source "$root/scripts/offline_deps.sh"
offline_deps "$root" || true
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi
status=0
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
"$py" -c "import sys, torch, numpy, nanobind; print('python', sys.version.split()[0], 'torch', torch.__version__, 'numpy', numpy.__version__, 'nanobind', nanobind.__version__)" \
  | tee "$out/embedding_python.txt"
"$py" -c "import cupy; print('cupy', cupy.__version__)" >>"$out/embedding_python.txt" 2>&1 || echo "cupy: absent (baseline (c) skips)" >>"$out/embedding_python.txt"
pylib=/tmp/gphash-pylib
if ! "$py" -c "import pytest" 2>/dev/null; then
  "$py" -m pip install -q --no-index --find-links "$root/.whl" --target "$pylib" pytest >"$out/embedding_pip.log" 2>&1 \
    || { echo "embedding_device: no pytest (bring its wheels in .whl/)"; status=1; }
fi
export PYTHONPATH="$builds/embedding/python:$pylib:${PYTHONPATH:-}"

# The extension needs Python.h. A system Python without its -dev package: bring python3.X-dev
# (and libpython3.X-dev) .debs in .deps/, unpacked above, and point CMake at them.
pyinc=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
if [[ ! -f $pyinc/Python.h ]]; then
  pyver=$("$py" -c "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')")
  if [[ -f /tmp/gphash-deps/usr/include/$pyver/Python.h ]]; then
    cmake_args+=(-DPython_INCLUDE_DIR=/tmp/gphash-deps/usr/include/$pyver)
  else
    echo "embedding_device: no Python.h for $py ($pyinc): install ${pyver}-dev or bring its .deb in .deps/"
    exit 1
  fi
fi
build=$builds/embedding
if ! { cmake -S "$root" -B "$build" "${cmake_args[@]}" -DGPHASH_PYTHON=ON -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF \
         -DGPHASH_SERVER=OFF -DGPHASH_REQUIRE_CUDA=ON -DPython_EXECUTABLE="$(command -v "$py")" &&
       cmake --build "$build" -j "$(nproc)" --target _gphash; } >"$out/build-embedding.log" 2>&1; then
  grep -B2 -A12 -m3 -E "error|Error" "$out/build-embedding.log" | head -40
  echo "embedding_device: BUILD FAILED (log in $out/build-embedding.log)"
  exit 1
fi
echo "build: $(($(date +%s) - t0)) s"

t1=$(date +%s)
(cd "$builds" && timeout 180 "$py" -m pytest -q -rs "$root/python/tests") >"$out/embedding_pytest.log" 2>&1 || status=1
echo "pytest: $(($(date +%s) - t1)) s"
t1=$(date +%s)
timeout 150 "$py" "$root/python/bench/embedding_bench.py" --out "$out" ${GPHASH_EMB_BENCH_ARGS:-} >"$out/embedding_bench.log" 2>&1 || status=1
echo "bench: $(($(date +%s) - t1)) s"
t1=$(date +%s)
timeout 90 "$py" "$root/python/examples/dlrm_inference.py" ${GPHASH_DLRM_ARGS:-} >"$out/dlrm_inference.log" 2>&1 || status=1
echo "dlrm: $(($(date +%s) - t1)) s"

echo "==== summary ($(($(date +%s) - t0)) s)"
grep -E "passed|failed|error" "$out/embedding_pytest.log" | tail -3 | sed 's/^/pytest: /'
grep -E "^(FAILED|ERROR)" "$out/embedding_pytest.log" | head -10
sed -n '/^==== embedding benchmark/,$p' "$out/embedding_bench.log"
tail -5 "$out/embedding_bench.log" | grep -iE "error|Traceback" && tail -15 "$out/embedding_bench.log"
grep -E "batch|cache|rows in|Error" "$out/dlrm_inference.log" | sed 's/^/dlrm: /' | head -12
exit $status
