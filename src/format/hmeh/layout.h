// The on-pool layout of an HMEH index: segments of cache-line buckets, Cross-KV slots, the radix
// tree directory, and how a key's hash picks its segment and bucket. docs/FORMAT.md section 9 is
// the prose form; this file is the code form. Encoding only: the protocols live in
// src/indexes/hmeh.
#pragma once

#include <cstdint>

#include "format/hash.h"
#include "format/hd.h"
#include "format/hmeh/meta.h"
#include "format/slot.h"

namespace gphash::format::hmeh {

// ---- Buckets and Cross-KV slots -------------------------------------------------------------
//
// A bucket is one 64-byte cache line and a slot never straddles two, so every word of a slot is
// written back with the others (Cross-KV, see below). Each slot is a row of 8-byte words:
//
//   8-byte keys:  [state = ~key][value word]                          16 bytes, 4 per bucket
//   16-byte keys: [state = fingerprint][key word 0][value word][key word 1]   32 bytes, 2 per bucket
//
// Cross-KV: key and value are split into 8-byte blocks (each written by one atomic store) stored
// alternately in one cache line, and the state word is stored last. Stores to one cache line
// become persistent in program order on x86 (a line is written back whole, holding every store
// made to it so far), so a persistent state word implies a persistent key and value: an insert
// needs one persist barrier (write-back of the line, then a fence), where ordering the value
// before the key across lines would need two.
inline constexpr uint32_t kBucketBytes = 64;

// The state word.
inline constexpr uint64_t kSlotEmpty = 0;      // never used since the segment was written: a
                                               // lookup that meets a bucket with an EMPTY slot stops
inline constexpr uint64_t kSlotClaimed = 1;    // an insert owns the slot and has not published yet
inline constexpr uint64_t kSlotTombstone = 2;  // erased (or a claim a crash cut short): free for an
                                               // insert, but lookups probe on past it
GPHASH_HD bool is_published(uint64_t state) { return state > kSlotTombstone; }
GPHASH_HD bool is_free(uint64_t state) { return state == kSlotEmpty || state == kSlotTombstone; }

// 8-byte keys are stored complemented, so three keys are reserved: 0xFFFFFFFFFFFFFFFF,
// 0xFFFFFFFFFFFFFFFE and 0xFFFFFFFFFFFFFFFD (their complements are the three states above).
GPHASH_HD bool is_reserved_key(uint64_t key) { return key >= 0xFFFFFFFFFFFFFFFDull; }
GPHASH_HD uint64_t encode_key_word(uint64_t key) { return ~key; }
GPHASH_HD uint64_t decode_key_word(uint64_t state) { return ~state; }

// 16-byte keys: the state is the key's full 64-bit hash, moved off the three state values.
GPHASH_HD uint64_t fingerprint(uint64_t hash) { return hash <= kSlotTombstone ? hash + 3 : hash; }

template <int KeyWidth>
struct SlotLayout;
template <>
struct SlotLayout<8> {
  static constexpr uint32_t kSlotBytes = 16;
  static constexpr uint32_t kStateWord = 0;
  static constexpr uint32_t kValueWord = 1;
  static constexpr uint32_t kKeyWords[1] = {0};  // the state word is the key
};
template <>
struct SlotLayout<16> {
  static constexpr uint32_t kSlotBytes = 32;
  static constexpr uint32_t kStateWord = 0;
  static constexpr uint32_t kValueWord = 2;
  static constexpr uint32_t kKeyWords[2] = {1, 3};  // key word i sits at word kKeyWords[i]
};
constexpr uint32_t slot_bytes(uint32_t key_width) { return key_width == 8 ? 16 : 32; }
constexpr uint32_t slots_per_bucket(uint32_t key_width) { return kBucketBytes / slot_bytes(key_width); }
constexpr bool is_supported_key_width(uint32_t w) { return w == 8 || w == 16; }

// ---- Segments -------------------------------------------------------------------------------
//
// A segment is 2^segment_bytes_log2 bytes of buckets: the first `addressable` buckets are where
// keys are homed, the last `stash_buckets` are the stash. A key's home bucket comes from the low
// 32 bits of its hash; it may sit in the home bucket or the probe_buckets - 1 buckets after it
// (wrapping around the addressable buckets), or in the stash. Placement rule (what lookups rely
// on): an item sits in the first probe bucket, in order, that had a free slot when it was
// inserted; in the stash only if none of its probe buckets had one, and then in the first stash
// bucket with a free slot. EMPTY slots only ever become used, so every probe bucket before an
// item's bucket has no EMPTY slot, and a lookup stops at the first bucket that has one.
struct SegmentGeometry {
  uint32_t buckets;      // 2^segment_bytes_log2 / 64
  uint32_t addressable;  // buckets - stash
  uint32_t probe;        // probe_buckets
  uint32_t stash;        // stash_buckets
  uint32_t slots_per_bucket;

  uint64_t bytes() const { return uint64_t{buckets} * kBucketBytes; }
  uint64_t slots() const { return uint64_t{buckets} * slots_per_bucket; }
  GPHASH_HD uint32_t home_bucket(uint64_t hash) const {
    return static_cast<uint32_t>(((hash & 0xFFFFFFFFull) * addressable) >> 32);
  }
  // The i-th probe bucket (0 .. probe-1) of a key homed at `home`.
  GPHASH_HD uint32_t probe_bucket(uint32_t home, uint32_t i) const {
    const uint32_t b = home + i;
    return b < addressable ? b : b - addressable;
  }
  GPHASH_HD uint32_t stash_bucket(uint32_t i) const { return addressable + i; }
};

// ---- Hashing --------------------------------------------------------------------------------
//
// One hash per key: h = XXH64 of the key words with seed hash_seed_for(hash_seed, 0) (slot.h).
// Its top bits choose the segment (the directory), its low 32 bits the home bucket, and for
// 16-byte keys all 64 bits are the fingerprint.
GPHASH_HD uint64_t key_seed(uint64_t hash_seed) { return hash_seed_for(hash_seed, 0); }
template <int KeyWords>
GPHASH_HD uint64_t key_hash(const uint64_t* key, uint64_t seed) {
  return xxh64_words<KeyWords>(key, seed);
}
// The directory prefix of a hash at local depth d: its top d bits.
GPHASH_HD uint64_t prefix_of(uint64_t hash, uint32_t depth) { return depth == 0 ? 0 : hash >> (64 - depth); }

// ---- The radix-tree directory ---------------------------------------------------------------
//
// A tree of nodes, each of 4 entries (8 bytes each) that consume 2 bits of the hash prefix; node 0
// is the root (level 0, hash bits 63..62). An entry is a child node or a segment. A segment of
// local depth d hangs in a node of level ceil(d/2) - 1 and fills 2^(2*level + 2 - d) of its
// entries (1 or 2), aligned; its prefix is the path to them. So every local depth >= 2 has a place,
// and a segment split publishes with one 8-byte store: a new child node replaces the entry of a
// segment that fills one, and a copy of the node replaces the parent's entry of a node whose
// segment fills two (copy on write). The flat directory in DRAM (2^G entries, G the largest local
// depth) is rebuilt from this tree at open.
inline constexpr uint32_t kNodeEntries = 4;
inline constexpr uint32_t kRadixBits = 2;
inline constexpr uint32_t kNodeBytes = kNodeEntries * 8;
inline constexpr uint32_t kMinDepth = 2;   // a fresh table has at least 4 segments
inline constexpr uint32_t kMaxDepth = 32;  // local depth limit (the flat directory has 2^G entries)
// A local depth is also at most 10 more than log2 of the segment arena's capacity, so the flat
// directory (4 bytes per entry) stays within 2^12 bytes per segment of the arena, whatever a
// damaged radix tree says; only keys that agree on that many hash bits could need more.
inline constexpr uint32_t kDepthHeadroom = 10;
inline uint32_t max_depth(uint64_t segment_capacity) {
  uint32_t log2 = 0;
  while (log2 < 64 && (uint64_t{1} << log2) < segment_capacity) ++log2;
  return log2 + kDepthHeadroom < kMaxDepth ? log2 + kDepthHeadroom : kMaxDepth;
}

enum class EntryKind : uint64_t { kNone = 0, kSegment = 1, kNode = 2 };
GPHASH_HD uint64_t segment_entry(uint64_t segment) { return segment << 2 | 1; }
GPHASH_HD uint64_t node_entry(uint64_t node) { return node << 2 | 2; }
GPHASH_HD EntryKind entry_kind(uint64_t entry) { return static_cast<EntryKind>(entry & 3); }
GPHASH_HD uint64_t entry_id(uint64_t entry) { return entry >> 2; }

// The level of the node a segment of local depth d hangs in, and how many entries it fills.
GPHASH_HD uint32_t node_level_of(uint32_t depth) { return (depth - 1) / kRadixBits; }
GPHASH_HD uint32_t entries_filled(uint32_t depth) { return 1u << (kRadixBits * (node_level_of(depth) + 1) - depth); }

}  // namespace gphash::format::hmeh
