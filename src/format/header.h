// The pool header: the one source of truth for what a pool holds and where. docs/FORMAT.md
// documents every byte; the static_asserts below pin the offsets it states.
//
// A pool file starts with two 4 KiB copies of the header (offsets 0 and 4096), then a 4 KiB
// maintenance page, then extents (levels and heap chunks) allocated in order. Each header write
// goes to the copy holding the older generation; at open the valid copy with the newer
// generation wins, so a torn header write falls back to the previous state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "format/hash.h"
#include "format/hd.h"
#include "format/gpm/meta.h"
#include "format/hmeh/meta.h"
#include "format/layout.h"
#include "format/shape.h"

namespace gphash::format {

inline constexpr uint64_t kHeaderBytes = 4096;
inline constexpr uint64_t kHeaderCopyOffset[2] = {0, 4096};
inline constexpr uint64_t kMaintenanceOffset = 8192;
inline constexpr uint64_t kReservedPrefixBytes = 12288;  // headers + maintenance page

inline constexpr unsigned char kMagic[8] = {0x89, 'G', 'P', 'H', 'A', 'S', 'H', '\n'};
inline constexpr uint32_t kByteOrderMark = 0x01020304;
inline constexpr uint16_t kFormatMajor = 2;
inline constexpr uint16_t kFormatMinor = 0;
// Feature bits: an unknown incompatible bit refuses the pool, an unknown compatible bit is ignored.
// Value checksums: every heap cell ends with a checksum of its value tied to its key (cell.h).
inline constexpr uint64_t kFeatureValueChecksums = 1;
inline constexpr uint64_t kKnownIncompatFeatures = kFeatureValueChecksums;
inline constexpr uint64_t kKnownCompatFeatures = 0;
inline constexpr uint8_t kHashXxh64 = 1;
inline constexpr uint32_t kMaxHeapChunks = 40;

// Which index a pool holds. The header's common part is the same for every index; the index
// section (PoolHeader::gphash, ...) is the index's own metadata.
enum IndexKind : uint32_t {
  kIndexGphash = 1,  // GPHash: levels of buckets, the value heap (this file, layout.h, slot.h)
  kIndexHmeh = 2,    // HMEH: extendible hashing with a radix-tree directory (format/hmeh/)
  kIndexGpm = 3,     // GPM: named regions, logs and checkpoint groups for GPU programs (format/gpm/, src/gpm/)
};

enum ResizeState : uint32_t {
  kResizeNone = 0,
  // A new top level (level_offset[bottom + L]) is allocated and the bottom level is being
  // rehashed into the levels above it. Recovery finishes the rehash.
  kResizeRehashing = 1,
};

// The GPHash index's section of the header (header offset 256).
struct GphashMeta {
  uint32_t key_width;
  uint32_t value_width;
  uint8_t levels;
  uint8_t hashes;
  uint8_t slots;
  uint8_t hash_function;
  uint32_t bucket_bytes;
  uint64_t hash_seed;
  // Level directory and state.
  uint32_t bottom_level;
  uint32_t resize_state;
  uint64_t level_offset[kMaxLevel + 1];  // by level number; 0 = not allocated
  // Value heap.
  uint32_t cell_size;
  uint32_t heap_chunk_count;
  uint64_t heap_first_chunk_cells;
  uint64_t heap_chunk_offset[kMaxHeapChunks];
};
static_assert(offsetof(GphashMeta, hash_seed) == 16);
static_assert(offsetof(GphashMeta, level_offset) == 32);
static_assert(offsetof(GphashMeta, cell_size) == 296);
static_assert(offsetof(GphashMeta, heap_chunk_offset) == 312);
static_assert(sizeof(GphashMeta) == 632);

inline constexpr uint64_t kIndexSectionOffset = 256;
inline constexpr uint64_t kIndexSectionBytes = 4088 - kIndexSectionOffset;

struct PoolHeader {
  // Common to every index.
  unsigned char magic[8];
  uint32_t byte_order;
  uint16_t version_major;
  uint16_t version_minor;
  uint64_t incompat_features;
  uint64_t compat_features;
  uint64_t generation;
  uint64_t pool_size;  // bytes the pool file must hold
  unsigned char uuid[16];
  uint64_t created_unix_ns;
  uint32_t index_kind;  // IndexKind
  uint32_t clean_shutdown;
  uint32_t extent_align_log2;
  uint32_t reserved0;  // reserved bytes are written as zero and ignored by readers
  uint64_t item_count;  // exact after a clean shutdown; recounted by recovery otherwise
  uint64_t pool_used;   // end of the last extent; the next extent starts here (aligned)
  // The last completed snapshot of the pool to a file (src/snapshot): when it was captured (0:
  // none), the pool's write counter (kWriteCounterOffset) at that moment, and the file's chain.
  uint64_t snapshot_unix_ns;
  uint64_t snapshot_writes;
  unsigned char snapshot_chain_id[16];
  // Membership of a sharded table (OpenOptions::shards, src/table/shards.h): shard_count 0 = a
  // table of its own; otherwise this pool is shard `shard_index` of `shard_count`, and every shard
  // of the set carries the same shard_set_id (the uuid of shard 0), so a pool of another set or
  // a wrong count is refused at open.
  unsigned char shard_set_id[16];
  uint32_t shard_count;
  uint32_t shard_index;
  // The application region: one extent the index never reads or writes (gphash-server keeps its
  // items there), 0 and 0 when the pool has none. Snapshots and restores carry it with the index.
  uint64_t attachment_offset;
  uint64_t attachment_bytes;
  unsigned char reserved[kIndexSectionOffset - 176];
  // The index's own metadata, selected by index_kind.
  union {
    GphashMeta gphash;
    HmehMeta hmeh;
    GpmMeta gpm;
    unsigned char index_section[kIndexSectionBytes];
  };
  uint64_t checksum;  // XXH64 (seed 0) of bytes [0, 4088)
};
static_assert(sizeof(PoolHeader) == kHeaderBytes, "the header is exactly 4 KiB");
static_assert(offsetof(PoolHeader, version_major) == 12);
static_assert(offsetof(PoolHeader, generation) == 32);
static_assert(offsetof(PoolHeader, index_kind) == 72);
static_assert(offsetof(PoolHeader, item_count) == 88);
static_assert(offsetof(PoolHeader, pool_used) == 96);
static_assert(offsetof(PoolHeader, snapshot_unix_ns) == 104);
static_assert(offsetof(PoolHeader, snapshot_writes) == 112);
static_assert(offsetof(PoolHeader, snapshot_chain_id) == 120);
static_assert(offsetof(PoolHeader, shard_set_id) == 136);
static_assert(offsetof(PoolHeader, shard_count) == 152);
static_assert(offsetof(PoolHeader, shard_index) == 156);
static_assert(offsetof(PoolHeader, attachment_offset) == 160);
static_assert(offsetof(PoolHeader, attachment_bytes) == 168);
static_assert(offsetof(PoolHeader, gphash) == kIndexSectionOffset);
static_assert(offsetof(PoolHeader, hmeh) == kIndexSectionOffset);
static_assert(offsetof(PoolHeader, gpm) == kIndexSectionOffset);
static_assert(sizeof(GpmMeta) <= kIndexSectionBytes);
static_assert(offsetof(PoolHeader, checksum) == 4088);

// The maintenance page records the one multi-slot step that is not naturally atomic: moving an
// item to make room for an insert (displacement). Written and cleared around each move. The
// checksum covers the two addresses, so a damaged record is refused rather than acted on.
struct MaintenanceRecord {
  uint64_t move_state;     // kMoveIdle or kMoveInProgress, written last / cleared first
  uint64_t move_from;      // packed SlotAddress
  uint64_t move_to;        // packed SlotAddress
  uint64_t move_checksum;  // move_record_checksum(move_from, move_to)
  uint64_t reserved[4];
};
static_assert(sizeof(MaintenanceRecord) == 64);
inline constexpr uint64_t kMoveIdle = 0;
inline constexpr uint64_t kMoveInProgress = 0x4D4F5645;  // "MOVE"
GPHASH_HD uint64_t move_record_checksum(uint64_t move_from, uint64_t move_to) {
  const uint64_t words[2] = {move_from, move_to};
  return xxh64_words<2>(words, kMoveInProgress);
}

// The pool's write counter, in the maintenance page on a cache line of its own: write operations
// begun on the pool since it was created. The facade adds a writing batch's operations before the
// batch runs, so the counter minus the header's snapshot_writes bounds what a restart from the
// last snapshot would lose. Informational: nothing in recovery depends on it.
inline constexpr uint64_t kWriteCounterOffset = kMaintenanceOffset + 64;
static_assert(kWriteCounterOffset % 64 == 0 && kWriteCounterOffset + 8 <= kReservedPrefixBytes);

uint64_t header_checksum(const PoolHeader& h);
void seal(PoolHeader& h);  // sets the checksum

// Derived geometry of a GPHash pool (index_kind 1).
inline uint32_t top_level(const PoolHeader& h) { return h.gphash.bottom_level + h.gphash.levels - 1; }
// The highest level that holds items: the top level, or one more while a resize rehashes.
inline uint32_t highest_level(const PoolHeader& h) {
  return top_level(h) + (h.gphash.resize_state == kResizeRehashing ? 1 : 0);
}
inline BucketLayout bucket_layout(const PoolHeader& h) { return {h.gphash.key_width, h.gphash.slots}; }
inline uint64_t level_bytes(const PoolHeader& h, uint32_t level) {
  return level_buckets(level) * h.gphash.bucket_bytes;
}
inline TableShape shape_of(const PoolHeader& h) { return {h.gphash.levels, h.gphash.hashes, h.gphash.slots}; }
inline bool has_value_checksums(const PoolHeader& h) { return (h.incompat_features & kFeatureValueChecksums) != 0; }
HeapGeometry heap_geometry(const PoolHeader& h);
uint64_t heap_cell_capacity(const PoolHeader& h);
uint64_t slot_capacity(const PoolHeader& h);  // slots in the active levels

// Checks one header copy on its own: magic, byte order, version, checksum, features and every
// field's range and the extents' bounds. Throws gphash::Error naming the field. `file_size` is the
// size of the pool file; a header describing more than that is reported as truncated.
void validate_header(const PoolHeader& h, uint64_t file_size);

// One line per field, for `gphash info` and diagnostics.
std::string describe(const PoolHeader& h);

}  // namespace gphash::format
