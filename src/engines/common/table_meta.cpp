#include "engines/common/table_meta.h"

#include <fmt/format.h>

#include <cstring>
#include <random>

#include "engines/common/crash_point.h"
#include "format/shape.h"
#include "gphash/error.h"

namespace gphash::engine {

using format::PoolHeader;

namespace {

void check_config(const TableConfig& c) {
  if (!format::is_supported_key_width(c.key_width))
    throw Error(ErrorCode::kInvalidArgument, fmt::format("key width {} is not supported: use 8, 16 or 32", c.key_width),
                "key_width");
  if (c.value_width == 0 || c.value_width > format::kMaxValueWidth)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("value width {} is not supported: use 1..{}", c.value_width, format::kMaxValueWidth),
                "value_width");
  if (!format::is_supported(c.shape))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("shape {} is not supported: use 2L-2H-8S, 4L-2H-4S or 1L-4H-8S", to_string(c.shape)), "shape");
  if (c.value_checksums && format::value_is_inline(c.value_width))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("value checksums protect heap cells, and {}-byte values live in the slot (up to {} bytes "
                            "do): use them with values over {} bytes",
                            c.value_width, format::kMaxInlineValue, format::kMaxInlineValue),
                "value_checksums");
  if (c.capacity == 0 || c.capacity > (uint64_t{1} << 36))
    throw Error(ErrorCode::kInvalidArgument, fmt::format("capacity {} is not in 1..2^36", c.capacity), "capacity");
}

uint64_t next_pow2(uint64_t x) { return x <= 1 ? 1 : uint64_t{1} << (64 - __builtin_clzll(x - 1)); }

}  // namespace

void TableMeta::initialize(pool::Pool& pool, const TableConfig& config) {
  check_config(config);
  PoolHeader h = pool.initial_header(format::kIndexGphash);
  std::random_device rd;
  if (config.value_checksums) h.incompat_features |= format::kFeatureValueChecksums;
  h.gphash.key_width = config.key_width;
  h.gphash.value_width = config.value_width;
  h.gphash.levels = config.shape.levels;
  h.gphash.hashes = config.shape.hashes;
  h.gphash.slots = config.shape.slots;
  h.gphash.hash_function = format::kHashXxh64;
  h.gphash.bucket_bytes = format::BucketLayout{config.key_width, config.shape.slots}.bytes();
  h.gphash.hash_seed = config.hash_seed ? *config.hash_seed : (uint64_t{rd()} << 32 | rd());

  // Smallest bottom level whose L levels hold `capacity` items at 90% load.
  const uint64_t per_bottom_bucket = uint64_t{config.shape.slots} * ((uint64_t{1} << config.shape.levels) - 1);
  uint32_t bottom = 0;
  while ((per_bottom_bucket << bottom) * 9 / 10 < config.capacity) ++bottom;
  h.gphash.bottom_level = bottom;
  if (format::top_level(h) > format::kMaxLevel)
    throw Error(ErrorCode::kInvalidArgument, fmt::format("capacity {} needs more than {} levels", config.capacity,
                                                         format::kMaxLevel), "capacity");
  for (uint32_t l = bottom; l <= format::top_level(h); ++l)
    h.gphash.level_offset[l] = pool.allocate_extent(h, format::level_bytes(h, l));

  if (!format::value_is_inline(config.value_width)) {
    h.gphash.cell_size = format::cell_size_for(config.value_width, config.value_checksums);
    // Room for the capacity and a sixteenth more: an update writes its new value to a free cell
    // before its old cell is freed (after the batch), so a table holding exactly its capacity,
    // a power of two, had no free cell and its first update batch doubled the heap (0.24 s for a
    // heap of 2^24 cells, H200 host-mapped, against 0.075 s of kernels for 16.8 M YCSB A
    // operations), leaving it three times the first chunk.
    h.gphash.heap_first_chunk_cells = std::max<uint64_t>(64, next_pow2(config.capacity + config.capacity / 16));
    h.gphash.heap_chunk_count = 1;
    h.gphash.heap_chunk_offset[0] = pool.allocate_extent(h, h.gphash.heap_first_chunk_cells * h.gphash.cell_size);
  }
  pool.write_initial_header(h);
}

void TableMeta::begin_resize(pool::Pool::Populate populate) {
  PoolHeader h = header();
  const uint32_t new_top = format::top_level(h) + 1;
  if (h.gphash.resize_state != format::kResizeNone) return;  // resuming: the level exists
  if (new_top > format::kMaxLevel)
    throw Error(ErrorCode::kNoSpace, fmt::format("table cannot grow past level {}", format::kMaxLevel));
  h.gphash.level_offset[new_top] = pool_.allocate_extent(h, format::level_bytes(h, new_top), populate);
  h.gphash.resize_state = format::kResizeRehashing;
  GPHASH_CRASH_POINT("resize.begin.before_header");
  pool_.write_header(h);
  GPHASH_CRASH_POINT("resize.begin.after_header");
}

void TableMeta::finish_resize() {
  PoolHeader h = header();
  const uint32_t old_bottom = h.gphash.bottom_level;
  const uint64_t old_offset = h.gphash.level_offset[old_bottom];
  const uint64_t old_bytes = format::level_bytes(h, old_bottom);
  h.gphash.level_offset[old_bottom] = 0;
  h.gphash.bottom_level = old_bottom + 1;
  h.gphash.resize_state = format::kResizeNone;
  GPHASH_CRASH_POINT("resize.finish.before_header");
  pool_.write_header(h);
  GPHASH_CRASH_POINT("resize.finish.after_header");
  pool_.release_extent(old_offset, old_bytes);
}

void TableMeta::grow_heap(pool::Pool::Populate populate) {
  PoolHeader h = header();
  if (h.gphash.heap_chunk_count >= format::kMaxHeapChunks)
    throw Error(ErrorCode::kNoSpace, "the value heap has its maximum number of chunks");
  format::HeapGeometry g = format::heap_geometry(h);
  h.gphash.heap_chunk_offset[h.gphash.heap_chunk_count] =
      pool_.allocate_extent(h, g.chunk_cells(h.gphash.heap_chunk_count) * h.gphash.cell_size, populate);
  ++h.gphash.heap_chunk_count;
  GPHASH_CRASH_POINT("heap.grow.before_header");
  pool_.write_header(h);
  GPHASH_CRASH_POINT("heap.grow.after_header");
}

// Half way: a LOAD of 8.4 M items (32-byte keys and values) into a table made for 64 K (7 resizes,
// 6 heap growths) with the CPU engine on the 2-core VM, alternating with the binary before:
// 6.04-7.02 -> 6.79-7.71 M/s in 6 of 6 pairs, 13 of 15 pairs over three runs. Reserving at once
// after each growth gained 10-14%, but then a table that stops growing holds its next level's
// memory until it closes. Space reserved and not grown into goes back at close.
void TableMeta::reserve_growth_ahead(uint64_t items, double max_load_factor) {
  constexpr double kAheadAt = 0.5;
  const PoolHeader& h = header();
  const uint32_t next_top = format::top_level(h) + 1;
  if (next_top <= format::kMaxLevel && reserved_level_ != next_top &&
      static_cast<double>(items) >= kAheadAt * max_load_factor * static_cast<double>(slot_capacity())) {
    reserved_level_ = next_top;
    pool_.reserve_ahead(format::level_bytes(h, next_top));
  }
  if (has_heap() && h.gphash.heap_chunk_count < format::kMaxHeapChunks && reserved_chunk_ != h.gphash.heap_chunk_count &&
      static_cast<double>(items) >= kAheadAt * static_cast<double>(heap_cells())) {
    reserved_chunk_ = h.gphash.heap_chunk_count;
    pool_.reserve_ahead(format::heap_geometry(h).chunk_cells(h.gphash.heap_chunk_count) * h.gphash.cell_size);
  }
}

void TableMeta::mark_open_dirty() { pool_.mark_open_dirty(); }

void TableMeta::mark_clean(uint64_t item_count) { pool_.mark_clean(item_count); }

}  // namespace gphash::engine
