#!/usr/bin/env bash
# Fuzzes the pool-open path: builds pool_open_fuzzer with clang (libFuzzer, AddressSanitizer,
# UBSan) in a build folder of its own, writes a seed corpus of small valid pools into it, and runs
# the fuzzer for FUZZ_SECONDS (default 60). Exits non-zero when the fuzzer finds a crash, a leak,
# a hang or an out-of-memory; the input that caused it is left in $FUZZ_BUILD_DIR/fuzz/artifacts.
#
#   FUZZ_SECONDS=30 scripts/fuzz.sh
#   scripts/fuzz.sh build-fuzz/fuzz/artifacts/crash-...    # replays one input
#
# Environment: FUZZ_SECONDS, FUZZ_BUILD_DIR (default build-fuzz), FUZZ_CXX (default clang++),
# FUZZ_JOBS (parallel fuzzing processes, default 1), FUZZ_TIMEOUT (seconds per input, default 20).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
timeout=${FUZZ_TIMEOUT:-20}
cxx=${FUZZ_CXX:-clang++}

generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S "$root" -B "$build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$cxx" \
  -DGPHASH_FUZZ=ON -DGPHASH_CUDA=OFF -DGPHASH_TESTS=OFF -DGPHASH_BENCH=OFF >/dev/null
cmake --build "$build" --target pool_open_fuzzer pool_fuzz_corpus

fuzzer="$build/fuzz/pool_open_fuzzer"
if [[ ! -x "$fuzzer" ]]; then
  echo "fuzz.sh: $fuzzer was not built (is add_subdirectory(fuzz) in the top-level CMakeLists.txt?)" >&2
  exit 2
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Pool files of the inputs go to a private folder in /dev/shm, removed however the run ends.
GPHASH_FUZZ_DIR=$(mktemp -d /dev/shm/gphash-fuzz.XXXXXX)
export GPHASH_FUZZ_DIR
trap 'rm -rf "$GPHASH_FUZZ_DIR"' EXIT

if [[ $# -gt 0 ]]; then  # replay the given inputs
  "$fuzzer" "$@"
  exit
fi

seeds="$build/fuzz/seeds"
corpus="$build/fuzz/corpus"    # inputs the fuzzer found interesting; kept between runs
artifacts="$build/fuzz/artifacts"
rm -rf "$seeds"
mkdir -p "$corpus" "$artifacts"
"$build/fuzz/pool_fuzz_corpus" "$seeds"

args=(-max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=4096 -max_len=262144
      -artifact_prefix="$artifacts/" -print_final_stats=1)
if [[ $jobs -gt 1 ]]; then args+=(-fork="$jobs"); fi
echo "fuzz.sh: fuzzing for ${seconds}s (artifacts go to $artifacts)"
status=0
"$fuzzer" "${args[@]}" "$corpus" "$seeds" || status=$?
if [[ $status -ne 0 ]]; then
  echo "fuzz.sh: the fuzzer found a problem (exit $status); inputs in $artifacts:" >&2
  ls -l "$artifacts" >&2 || true
  exit "$status"
fi
echo "fuzz.sh: no crash in ${seconds}s"
