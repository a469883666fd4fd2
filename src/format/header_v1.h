// The header of format version 1.0, kept only to convert such pools to the current version
// (`gphash convert`). Version 1 had no common/index split: the GPHash fields sat in the header
// itself. The levels, heap and maintenance page are laid out the same way in both versions, so a
// conversion rewrites the header (and seals the maintenance record) and moves no data.
#pragma once

#include <cstdint>

#include "format/header.h"

namespace gphash::format::v1 {

struct PoolHeader {
  unsigned char magic[8];
  uint32_t byte_order;
  uint16_t version_major;
  uint16_t version_minor;
  uint64_t incompat_features;
  uint64_t compat_features;
  uint64_t generation;
  uint64_t pool_size;
  unsigned char uuid[16];
  uint64_t created_unix_ns;
  uint32_t key_width;
  uint32_t value_width;
  uint8_t levels;
  uint8_t hashes;
  uint8_t slots;
  uint8_t hash_function;
  uint32_t bucket_bytes;
  uint64_t hash_seed;
  uint32_t bottom_level;
  uint32_t resize_state;
  uint32_t clean_shutdown;
  uint32_t extent_align_log2;
  uint64_t item_count;
  uint64_t pool_used;
  uint64_t level_offset[kMaxLevel + 1];
  uint32_t cell_size;
  uint32_t heap_chunk_count;
  uint64_t heap_first_chunk_cells;
  uint64_t heap_chunk_offset[kMaxHeapChunks];
  unsigned char reserved[3360];
  uint64_t checksum;
};
static_assert(sizeof(PoolHeader) == kHeaderBytes);
static_assert(offsetof(PoolHeader, level_offset) == 128);
static_assert(offsetof(PoolHeader, heap_chunk_offset) == 408);

// Whether a header copy is an intact version-1 header (magic, version 1, its checksum).
bool is_intact(const PoolHeader& h);
// The same pool described by a current header (same generation). The result still has to pass
// validate_header().
format::PoolHeader upgrade(const PoolHeader& h);

}  // namespace gphash::format::v1
