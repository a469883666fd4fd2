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
  static void copy(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }
  // Persist barrier: once it returns, the stores to [p, p+n) survive what the pool's kind promises.
  void persist(const void* p, size_t n) const { pool_->persist(p, n); }

 private:
  const pool::Pool* pool_;
};

}  // namespace gphash::engine::cpu
