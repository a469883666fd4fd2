// A cheap clock for time breakdowns (the server's gphash_seconds_* statistics): the CPU's time
// stamp counter on x86-64, a few nanoseconds a read, where clock_gettime took 5% of
// gphash-server's CPU time on the 16-core GPU machine's VM, read about ten times per request
// (perf, bench/results/2026-11-29-server-partitions). Elsewhere steady_clock. For durations that
// are reported or compared with each other, never for deadlines.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace gphash::kv {

class TickClock {
 public:
  static uint64_t now() {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return steady_ns();
#endif
  }
  static uint64_t to_ns(uint64_t ticks) { return static_cast<uint64_t>(static_cast<double>(ticks) * ns_per_tick()); }
  static uint64_t ns_since(uint64_t start) { return to_ns(now() - start); }

 private:
  static uint64_t steady_ns() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
  }
  static double ns_per_tick() {
#if defined(__x86_64__)
    // Calibrated once, against steady_clock over 5 ms.
    static const double ratio = [] {
      const uint64_t n0 = steady_ns(), t0 = __rdtsc();
      while (steady_ns() - n0 < 5'000'000) {
      }
      const uint64_t n1 = steady_ns(), t1 = __rdtsc();
      return static_cast<double>(n1 - n0) / static_cast<double>(t1 - t0);
    }();
    return ratio;
#else
    return 1.0;
#endif
  }
};

}  // namespace gphash::kv
