// The CPU engine's tag mirror: one byte per slot of the active levels, in DRAM, kept next to the
// pool by every write the engine makes (0 = empty, 1 = claimed by an insert in flight, >= 2 = the
// tag of a published slot, tag_of_state below). A bucket's S tags are one word, so a key's
// candidates are L*H word reads in arrays of 1/16 of the table's size (or less), mapped with huge
// pages, instead of L*H buckets of the pool on as many 4 KiB pages: a miss reads no pool memory at
// all, and a hit reads the pool only at slots whose tag matches. Dash keeps fingerprints in its
// buckets for the same reason; the pool format stays as it is.
//
// Volatile: rebuilt from the pool at every open (the pool is the truth; the mirror is never
// persisted), and off while recovery runs. Writers order their stores so a reader never misses a
// published key: a slot's tag is set after its state word is published and cleared after the
// state word is emptied; an insert claims a slot here (0 -> 1 by CAS), and the pool's state word
// stays EMPTY until the insert publishes it.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>

#include "format/layout.h"
#include "format/shape.h"

namespace gphash::engine::cpu {

template <int S>
class TagMirror {
  static_assert(S == 4 || S == 8, "a bucket's tags are one 32- or 64-bit word");

 public:
  using Word = std::conditional_t<S == 8, uint64_t, uint32_t>;
  static constexpr uint8_t kEmpty = 0;
  static constexpr uint8_t kClaimed = 1;

  TagMirror() = default;
  TagMirror(const TagMirror&) = delete;
  TagMirror& operator=(const TagMirror&) = delete;
  ~TagMirror() {
    for (uint32_t l = 0; l <= format::kMaxLevel; ++l) release(l);
  }

  bool on() const { return on_; }
  void set_on(bool on) { on_ = on; }

  // Keeps exactly levels [lo, hi]: a new level starts all empty, as a new level of the pool does.
  void keep_levels(uint32_t lo, uint32_t hi) {
    for (uint32_t l = 0; l <= format::kMaxLevel; ++l) {
      if (l < lo || l > hi) release(l);
      else if (!level_[l]) allocate(l);
    }
  }

  Word word(uint32_t level, uint64_t index) const { return __atomic_load_n(word_at(level, index), __ATOMIC_ACQUIRE); }
  const void* address(uint32_t level, uint64_t index) const { return word_at(level, index); }

  // The tag of a published slot, from its state word alone (the key word of an 8-byte key, the
  // fingerprint of a wider one): the top byte of a multiplicative hash, off the two values that
  // mean empty and claimed. From the state word, so rebuilding the mirror at open reads the
  // levels and hashes no key (with the fingerprint's tag, as the GPU mirror has, every 8-byte key
  // was hashed twice: 76-78 ms of a 16 M-key open on the 2-core VM, against 0.01 without the
  // mirror).
  static uint8_t tag_of_state(uint64_t state) {
    const uint8_t t = static_cast<uint8_t>((state * 0x9E3779B97F4A7C15ull) >> 56);
    return t <= kClaimed ? static_cast<uint8_t>(t + 2) : t;
  }

  // 0x80 in each byte of w that equals `tag`, 0 elsewhere (exact per byte: no borrow between
  // bytes). Slots in order: `first_slot(m)`, then m &= m - 1.
  static Word match_mask(Word w, uint8_t tag) {
    constexpr Word kLow7 = static_cast<Word>(0x7F7F7F7F7F7F7F7Full);
    const Word x = w ^ static_cast<Word>(0x0101010101010101ull * tag);
    return static_cast<Word>(~(((x & kLow7) + kLow7) | x | kLow7));
  }
  static int first_slot(Word m) { return __builtin_ctzll(m) >> 3; }
  // Set bytes of a match mask (one bit per byte, so the sum fits the top byte without a carry;
  // __builtin_popcount is a library call unless the build targets POPCNT).
  static int count(Word m) {
    return static_cast<int>(((static_cast<uint64_t>(m) >> 7) * 0x0101010101010101ull) >> 56);
  }

  bool claim(uint32_t level, uint64_t index, uint32_t slot) {
    uint8_t expected = kEmpty;
    return __atomic_compare_exchange_n(byte_at(level, index, slot), &expected, kClaimed, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
  }
  void set(uint32_t level, uint64_t index, uint32_t slot, uint8_t v) {
    __atomic_store_n(byte_at(level, index, slot), v, __ATOMIC_RELEASE);
  }
  uint8_t get(uint32_t level, uint64_t index, uint32_t slot) const {
    return __atomic_load_n(byte_at(level, index, slot), __ATOMIC_ACQUIRE);
  }

 private:
  Word* word_at(uint32_t level, uint64_t index) const { return reinterpret_cast<Word*>(level_[level]) + index; }
  uint8_t* byte_at(uint32_t level, uint64_t index, uint32_t slot) const { return level_[level] + index * S + slot; }

  // Huge pages where the kernel allows them (transparent, on madvise): the mirror is read at
  // random, and 4 KiB pages would bring back the TLB misses it is there to avoid. The mapping is
  // aligned to 2 MiB, or the kernel backs only the aligned middle with huge pages. Anonymous
  // memory is zero-filled: all slots empty.
  static constexpr size_t kHugePage = size_t{2} << 20;

  void allocate(uint32_t l) {
    const size_t bytes = static_cast<size_t>(format::level_buckets(l)) * S;
    const size_t span = bytes >= kHugePage ? bytes + kHugePage : bytes;
    void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    uint8_t* base = static_cast<uint8_t*>(p);
    if (span != bytes) {
      uint8_t* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1));
      if (aligned > base) munmap(base, static_cast<size_t>(aligned - base));
      const size_t tail = static_cast<size_t>(base + span - (aligned + bytes));
      if (tail) munmap(aligned + bytes, tail);
      base = aligned;
#ifdef MADV_HUGEPAGE
      madvise(base, bytes, MADV_HUGEPAGE);
#endif
    }
    level_[l] = base;
    bytes_[l] = bytes;
  }
  void release(uint32_t l) {
    if (!level_[l]) return;
    munmap(level_[l], bytes_[l]);
    level_[l] = nullptr;
    bytes_[l] = 0;
  }

  uint8_t* level_[format::kMaxLevel + 1] = {};
  size_t bytes_[format::kMaxLevel + 1] = {};
  bool on_ = false;
};

}  // namespace gphash::engine::cpu
