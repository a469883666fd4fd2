#!/usr/bin/env bash
# HMEH's concurrency under ThreadSanitizer: builds hmeh_concurrency_test in a tree of its own with
# -fsanitize=thread (the HMEH engine then runs its threads with std::thread, which TSan can follow,
# instead of OpenMP; src/indexes/hmeh/parallel.h) and runs it. Engine threads share every segment,
# so slot CAS races, splits, directory doublings and lock-free reads all meet; any data race TSan
# sees fails the run. Then cell_allocator_test, the value heap's cell allocator under threads that
# exhaust and grow the heap (the CPU engine and HMEH share it). A couple of minutes on 2 cores.
#
# Environment: GPHASH_TSAN_BUILD_DIR (default build-tsan), GPHASH_HMEH_STRESS_ROUNDS (default 60).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GPHASH_TSAN_BUILD_DIR:-$root/build-tsan}
start=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPHASH_TSAN=ON -DGPHASH_CUDA=OFF \
  -DGPHASH_TESTS=ON -DGPHASH_BENCH=OFF >/dev/null
cmake --build "$build" --target hmeh_concurrency_test cell_allocator_test
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
export GPHASH_HMEH_STRESS_ROUNDS=${GPHASH_HMEH_STRESS_ROUNDS:-60}
"$build/tests/hmeh_concurrency_test" --gtest_color=no
"$build/tests/cell_allocator_test" --gtest_color=no
echo "tsan.sh: hmeh_concurrency_test and cell_allocator_test passed under ThreadSanitizer in $(($(date +%s) - start)) s"
