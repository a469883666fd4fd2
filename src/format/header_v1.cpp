#include "format/header_v1.h"

#include <cstring>

#include "format/hash.h"

namespace gphash::format::v1 {

bool is_intact(const PoolHeader& h) {
  return std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 && h.byte_order == kByteOrderMark && h.version_major == 1 &&
         xxh64(&h, offsetof(PoolHeader, checksum), 0) == h.checksum;
}

format::PoolHeader upgrade(const PoolHeader& old) {
  format::PoolHeader h{};
  std::memcpy(h.magic, old.magic, sizeof h.magic);
  h.byte_order = old.byte_order;
  h.version_major = kFormatMajor;
  h.version_minor = kFormatMinor;
  h.incompat_features = old.incompat_features;  // version 1 defined no feature bits
  h.compat_features = old.compat_features;
  h.generation = old.generation;
  h.pool_size = old.pool_size;
  std::memcpy(h.uuid, old.uuid, sizeof h.uuid);
  h.created_unix_ns = old.created_unix_ns;
  h.index_kind = kIndexGphash;
  h.clean_shutdown = old.clean_shutdown;
  h.extent_align_log2 = old.extent_align_log2;
  h.item_count = old.item_count;
  h.pool_used = old.pool_used;
  GphashMeta& g = h.gphash;
  g.key_width = old.key_width;
  g.value_width = old.value_width;
  g.levels = old.levels;
  g.hashes = old.hashes;
  g.slots = old.slots;
  g.hash_function = old.hash_function;
  g.bucket_bytes = old.bucket_bytes;
  g.hash_seed = old.hash_seed;
  g.bottom_level = old.bottom_level;
  g.resize_state = old.resize_state;
  std::memcpy(g.level_offset, old.level_offset, sizeof g.level_offset);
  g.cell_size = old.cell_size;
  g.heap_chunk_count = old.heap_chunk_count;
  g.heap_first_chunk_cells = old.heap_first_chunk_cells;
  std::memcpy(g.heap_chunk_offset, old.heap_chunk_offset, sizeof g.heap_chunk_offset);
  seal(h);
  return h;
}

}  // namespace gphash::format::v1
