// How the CPU engine touches pool memory. Every store to the pool goes through one of these
// calls, so a test build can substitute a recording implementation (crash-image emulation)
// for DirectMemory without touching the engine (the seam LevelDB's Env gives its tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "pool/pool.h"

namespace gphash::engine::cpu {

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
