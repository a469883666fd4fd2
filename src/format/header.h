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

#include "format/layout.h"
#include "format/shape.h"

namespace gphash::format {

inline constexpr uint64_t kHeaderBytes = 4096;
inline constexpr uint64_t kHeaderCopyOffset[2] = {0, 4096};
inline constexpr uint64_t kMaintenanceOffset = 8192;
inline constexpr uint64_t kReservedPrefixBytes = 12288;  // headers + maintenance page

inline constexpr unsigned char kMagic[8] = {0x89, 'G', 'P', 'H', 'A', 'S', 'H', '\n'};
inline constexpr uint32_t kByteOrderMark = 0x01020304;
inline constexpr uint16_t kFormatMajor = 1;
inline constexpr uint16_t kFormatMinor = 0;
// Feature bits: an unknown incompatible bit refuses the pool, an unknown compatible bit is ignored.
inline constexpr uint64_t kKnownIncompatFeatures = 0;
inline constexpr uint64_t kKnownCompatFeatures = 0;
inline constexpr uint8_t kHashXxh64 = 1;
inline constexpr uint32_t kMaxHeapChunks = 40;

enum ResizeState : uint32_t {
  kResizeNone = 0,
  // A new top level (level_offset[bottom + L]) is allocated and the bottom level is being
  // rehashed into the levels above it. Recovery finishes the rehash.
  kResizeRehashing = 1,
};

struct PoolHeader {
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
  // Table configuration.
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
  uint32_t clean_shutdown;
  uint32_t extent_align_log2;
  uint64_t item_count;  // exact after a clean shutdown; recounted by recovery otherwise
  uint64_t pool_used;   // end of the last extent; the next extent starts here (aligned)
  uint64_t level_offset[kMaxLevel + 1];  // by level number; 0 = not allocated
  // Value heap.
  uint32_t cell_size;
  uint32_t heap_chunk_count;
  uint64_t heap_first_chunk_cells;
  uint64_t heap_chunk_offset[kMaxHeapChunks];
  unsigned char reserved[3360];
  uint64_t checksum;  // XXH64 (seed 0) of bytes [0, 4088)
};
static_assert(sizeof(PoolHeader) == kHeaderBytes, "the header is exactly 4 KiB");
static_assert(offsetof(PoolHeader, key_width) == 72);
static_assert(offsetof(PoolHeader, hash_seed) == 88);
static_assert(offsetof(PoolHeader, bottom_level) == 96);
static_assert(offsetof(PoolHeader, item_count) == 112);
static_assert(offsetof(PoolHeader, level_offset) == 128);
static_assert(offsetof(PoolHeader, cell_size) == 392);
static_assert(offsetof(PoolHeader, heap_chunk_offset) == 408);
static_assert(offsetof(PoolHeader, checksum) == 4088);

// The maintenance page records the one multi-slot step that is not naturally atomic: moving an
// item to make room for an insert (displacement). Written and cleared around each move.
struct MaintenanceRecord {
  uint64_t move_state;  // kMoveIdle or kMoveInProgress, written last / cleared first
  uint64_t move_from;   // packed SlotAddress
  uint64_t move_to;     // packed SlotAddress
  uint64_t reserved[5];
};
inline constexpr uint64_t kMoveIdle = 0;
inline constexpr uint64_t kMoveInProgress = 0x4D4F5645;  // "MOVE"

uint64_t header_checksum(const PoolHeader& h);
void seal(PoolHeader& h);  // sets the checksum

// Derived geometry.
inline uint32_t top_level(const PoolHeader& h) { return h.bottom_level + h.levels - 1; }
inline BucketLayout bucket_layout(const PoolHeader& h) { return {h.key_width, h.slots}; }
inline uint64_t level_bytes(const PoolHeader& h, uint32_t level) {
  return level_buckets(level) * h.bucket_bytes;
}
inline TableShape shape_of(const PoolHeader& h) { return {h.levels, h.hashes, h.slots}; }
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
