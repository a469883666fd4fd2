// How the CPU engine touches pool memory. Every store to the pool goes through one of these
// calls, so a test build can substitute a recording implementation (crash-image emulation)
// for DirectMemory without touching the engine (the seam LevelDB's Env gives its tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "pool/pool.h"

namespace gphash::engine::cpu {

// A line to be read soon, into every cache level: a prefetch the compiler cannot drop. With
// __builtin_prefetch, GCC 12 at -O3 compiled CpuTable::prefetch to nothing for 8-byte keys (the
// second line's prefetch, b + 64, made it drop all of them; objdump of the batch loop showed no
// prefetch instruction), so the batch driver's software pipelining did nothing; it dropped HMEH's
// prefetch of a batch's keys too. An asm statement is emitted as written. Measured on the 2-core
// VM, 16 M 8-byte keys, one thread: searches about 4.2 -> 17 M/s.
inline void prefetch_line(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

// The same for a line about to be written: owned, so the stores (or a locked instruction) do not
// ask for it again. (__builtin_prefetch(p, 1) emits prefetchw only where the compiler targets
// PRFCHW, which the default x86-64 target does not.)
inline void prefetch_for_write(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1);
#endif
}

class DirectMemory {
 public:
  explicit DirectMemory(const pool::Pool* pool) : pool_(pool) {}

  static uint64_t load(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  static void store(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
  // Strong CAS; on failure `expected` receives the current value.
  static bool cas(uint64_t* p, uint64_t& expected, uint64_t desired) {
    return __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
  // Word by word where it can: a lock-free reader may be reading `dst` (HMEH reuses a split
  // segment's memory at once; the reader's version check discards what it read), and plain
  // stores under its atomic loads would be a data race. On x86 these are the same moves.
  static void copy(void* dst, const void* src, size_t n) {
    if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | n) % 8 != 0)
      return static_cast<void>(std::memcpy(dst, src, n));
    auto* d = static_cast<uint64_t*>(dst);
    const auto* s = static_cast<const uint64_t*>(src);
    for (size_t i = 0; i < n / 8; ++i) __atomic_store_n(d + i, s[i], __ATOMIC_RELAXED);
  }
  // Persist barrier: once it returns, the stores to [p, p+n) survive what the pool's kind promises.
  void persist(const void* p, size_t n) const { pool_->persist(p, n); }

 private:
  const pool::Pool* pool_;
};

}  // namespace gphash::engine::cpu
