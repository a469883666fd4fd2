#!/usr/bin/env bash
# CI step for the Python package: a venv, `pip install .` (CPU engine only: GPHASH_CUDA=OFF), and
# the pytest suites in python/tests (NumPy; the torch tests skip where torch is absent, the GPU
# tests where there is no GPU). The venv and scikit-build-core's build folder live in build-py/
# (ignored by git), so a second run reuses both.
#
#   scripts/python_tests.sh            (GPHASH_PYTHON_TORCH=1 also installs CPU torch, if reachable)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$root/build-py/venv
t0=$(date +%s)
[[ -x $venv/bin/python ]] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
"$venv/bin/python" -m pip install -q pytest numpy
if [[ ${GPHASH_PYTHON_TORCH:-0} == 1 ]]; then
  "$venv/bin/python" -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu || echo "python_tests: torch did not install; its tests skip"
fi
GPHASH_CUDA=${GPHASH_CUDA:-OFF} CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$venv/bin/python" -m pip install -q "$root"
echo "python_tests: install $(($(date +%s) - t0)) s"
# From outside the source tree, so `import gphash` is the installed package.
cd "$root/build-py"
"$venv/bin/python" -m pytest -q -rs "$root/python/tests"
echo "python_tests: total $(($(date +%s) - t0)) s"
