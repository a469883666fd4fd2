#!/usr/bin/env bash
# Runs every gphash-server test: the GoogleTest suites of the parser, the key-value layer and the
# io_uring batch, then the out-of-process tests against real tools on loopback (differential test
# against Debian's memcached, memccapable, pymemcache/pylibmc, nutcracker, kill -9 in store mode,
# operations, 1,000 connections), with io_uring and without. Installs the Debian packages it needs
# if any is missing.
#
#   scripts/server_tests.sh            # build (build/, or GPHASH_BUILD_DIR) and run them all
#   scripts/server_tests.sh fuzz [S]   # fuzz the request path for S seconds (default 20; clang)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GPHASH_BUILD_DIR:-$root/build}

GPHASH_DEPS_EXTRA="${GPHASH_DEPS_EXTRA:-} memcached libmemcached-tools nutcracker python3-pymemcache python3-pylibmc" \
  "$root/scripts/deps.sh"

if [[ ${1:-} == fuzz ]]; then
  seconds=${2:-20}
  GPHASH_DEPS_EXTRA="clang libfuzzer-14-dev libclang-rt-14-dev" "$root/scripts/deps.sh"
  fbuild=${FUZZ_BUILD_DIR:-$root/build-fuzz}
  cmake -S "$root" -B "$fbuild" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++}" \
    -DGPHASH_FUZZ=ON -DGPHASH_CUDA=OFF -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF >/dev/null
  cmake --build "$fbuild" --target server_parser_fuzzer
  corpus="$fbuild/fuzz/server-corpus"
  artifacts="$fbuild/fuzz/server-artifacts"
  mkdir -p "$corpus" "$artifacts"
  # Seeds: the request sequences of the differential corpus, one file per case.
  /usr/bin/python3 - "$root/tests/server/corpus.txt" "$corpus" <<'PY'
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from differential_test import load_cases
for i, case in enumerate(load_cases(sys.argv[1])):
    if len(case["data"]) < 100_000:
        open(os.path.join(sys.argv[2], f"seed-{i}"), "wb").write(case["data"])
PY
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  echo "server_tests.sh: fuzzing the request path for ${seconds}s (artifacts go to $artifacts)"
  "$fbuild/fuzz/server_parser_fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 "$corpus"
  echo "server_tests.sh: no crash in ${seconds}s"
  exit 0
fi

"$root/scripts/build.sh"
ctest --test-dir "$build" -R '^ServerParser\.|^KvStore\.|^IoBatch\.' --output-on-failure -j "$(nproc)"
ctest --test-dir "$build" -L server --output-on-failure --timeout 600
# Again with plain recv and send calls (the default batches them through io_uring where it can).
GPHASH_SERVER_ARGS="${GPHASH_SERVER_ARGS:-} --io-uring off" ctest --test-dir "$build" -L server --output-on-failure --timeout 600
