// How a slot encodes its state, and how a key maps to buckets and a fingerprint.
//
// The state word of a slot is its fingerprint word (16- and 32-byte keys) or its key word
// (8-byte keys). Two values are reserved: EMPTY = 0 and INSERTING = 1, so zero-filled memory is
// an empty table and a new level needs no initialisation. 8-byte keys are stored complemented
// (~key), which makes the reserved user keys 0xFFFF'FFFF'FFFF'FFFF and ...FFFE.
#pragma once

#include <cstdint>

#include "format/hash.h"
#include "format/hd.h"

namespace gphash::format {

inline constexpr uint64_t kSlotEmpty = 0;
inline constexpr uint64_t kSlotInserting = 1;

GPHASH_HD bool is_published(uint64_t state) { return state > kSlotInserting; }

// 8-byte keys: the key word is the state.
GPHASH_HD bool is_reserved_key(uint64_t key) { return key >= 0xFFFFFFFFFFFFFFFEull; }
GPHASH_HD uint64_t encode_key_word(uint64_t key) { return ~key; }
GPHASH_HD uint64_t decode_key_word(uint64_t word) { return ~word; }

// Seed of hash function j, derived from the pool's hash seed.
GPHASH_HD uint64_t hash_seed_for(uint64_t pool_seed, int j) {
  return mix64(pool_seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(j + 1));
}

// Bucket of a key at a level: the top `level` bits of its hash. It depends on the level only,
// not on which level is currently on top, so items in middle levels never move on a resize; and
// bucket b at level l is shared by buckets 2b and 2b+1 at level l+1 (inter-level sharing).
GPHASH_HD uint64_t bucket_at(uint64_t hash, uint32_t level) {
  return level == 0 ? 0 : hash >> (64 - level);
}

// Fingerprint from the low 32 bits of the first and last hash: bucket indices use at most the
// top 32 bits, so fingerprint bits are independent of bucket bits. Never EMPTY or INSERTING.
GPHASH_HD uint64_t fingerprint(uint64_t first_hash, uint64_t last_hash) {
  uint64_t fp = (first_hash << 32) | (last_hash & 0xFFFFFFFFull);
  return fp <= kSlotInserting ? fp + 2 : fp;
}

// One-byte tag of a fingerprint for compact in-memory mirrors: 0 and 1 stay free for EMPTY and
// INSERTING there as well.
GPHASH_HD uint8_t tag_of(uint64_t fp) {
  uint8_t t = static_cast<uint8_t>(fp >> 32);
  return t <= 1 ? static_cast<uint8_t>(t + 2) : t;
}

// Slot addresses as one word (used by the maintenance record and diagnostics).
struct SlotAddress {
  uint32_t level;
  uint64_t bucket;
  uint32_t slot;
};
GPHASH_HD uint64_t pack(SlotAddress a) {
  return (static_cast<uint64_t>(a.level) << 58) | (a.bucket << 6) | a.slot;
}
GPHASH_HD SlotAddress unpack_slot_address(uint64_t w) {
  return {static_cast<uint32_t>(w >> 58), (w >> 6) & ((1ull << 52) - 1), static_cast<uint32_t>(w & 63)};
}

}  // namespace gphash::format
