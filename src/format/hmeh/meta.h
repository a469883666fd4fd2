// The HMEH index's section of the pool header (header offset 256, selected by index_kind = 2).
// docs/FORMAT.md section 9 documents every byte; the static_asserts pin the offsets it states.
//
// An HMEH pool holds three arenas, each a list of chunks that doubles as it grows (chunk c holds
// first << c units, like the GPHash value heap, so a unit never moves):
//   - segments (2^segment_bytes_log2 bytes each): the hash buckets (format/hmeh/layout.h);
//   - radix nodes (32 bytes each): the radix-tree directory, node 0 being its root;
//   - heap cells (cell_size bytes each), for values over 8 bytes.
// Which segments and nodes are in use is not stored: it is what the radix tree reaches from the
// root, rebuilt at open; the rest of an arena is free. Heap cells are free unless a published
// slot references them, as in GPHash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gphash::format {

struct PoolHeader;

namespace hmeh {

inline constexpr uint32_t kMaxChunks = 40;  // per arena
inline constexpr uint32_t kMinSegmentBytesLog2 = 12;  // 4 KiB: 64 buckets
inline constexpr uint32_t kMaxSegmentBytesLog2 = 20;  // 1 MiB
inline constexpr uint32_t kDefaultSegmentBytesLog2 = 14;  // 16 KiB, as the HMEH paper chose
inline constexpr uint32_t kMaxProbeBuckets = 16;
inline constexpr uint32_t kMaxStashBuckets = 16;

}  // namespace hmeh

struct HmehMeta {
  uint32_t key_width;           // 8 or 16
  uint32_t value_width;         // 1 .. 65536; up to 8 bytes inline in the slot
  uint8_t hash_function;        // 1 = XXH64
  uint8_t segment_bytes_log2;   // 12 .. 20
  uint8_t probe_buckets;        // linear probing distance: 1 .. 16 buckets from the home bucket
  uint8_t stash_buckets;        // 0 .. 16 buckets at the end of each segment
  uint32_t reserved0;
  uint64_t hash_seed;
  // Segment and radix-node arenas.
  uint32_t segment_chunk_count;  // 1 .. 40
  uint32_t node_chunk_count;     // 1 .. 40
  uint64_t segment_first_chunk;  // segments in chunk 0, a power of two
  uint64_t node_first_chunk;     // nodes in chunk 0, a power of two
  // Value heap (as GPHash's: cell_size 0 and no chunks when values are inline).
  uint32_t cell_size;
  uint32_t heap_chunk_count;
  uint64_t heap_first_chunk_cells;
  uint64_t segment_chunk_offset[hmeh::kMaxChunks];
  uint64_t node_chunk_offset[hmeh::kMaxChunks];
  uint64_t heap_chunk_offset[hmeh::kMaxChunks];
};
static_assert(offsetof(HmehMeta, segment_bytes_log2) == 9);
static_assert(offsetof(HmehMeta, hash_seed) == 16);
static_assert(offsetof(HmehMeta, segment_chunk_count) == 24);
static_assert(offsetof(HmehMeta, segment_first_chunk) == 32);
static_assert(offsetof(HmehMeta, node_first_chunk) == 40);
static_assert(offsetof(HmehMeta, cell_size) == 48);
static_assert(offsetof(HmehMeta, heap_first_chunk_cells) == 56);
static_assert(offsetof(HmehMeta, segment_chunk_offset) == 64);
static_assert(offsetof(HmehMeta, node_chunk_offset) == 384);
static_assert(offsetof(HmehMeta, heap_chunk_offset) == 704);
static_assert(sizeof(HmehMeta) == 1024);

// Checks the HMEH section of a header whose common part is valid (called by validate_header for
// index_kind 2); throws gphash::Error (kCorruptHeader) naming the field. Adds the section's extents
// to `extents` for the caller's overlap check.
void validate_hmeh_section(const PoolHeader& h, std::vector<std::pair<uint64_t, uint64_t>>& extents);

// One line per field of the section, for describe().
std::string describe_hmeh_section(const PoolHeader& h);

}  // namespace gphash::format
