// Host-side owner of a pool's table metadata: creating the initial table, resolving levels and
// heap cells to addresses, and the header transitions of resize and heap growth. Both engines
// use it, so every header change goes through one place.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/header.h"
#include "format/layout.h"
#include "gphash/config.h"
#include "pool/pool.h"

namespace gphash::engine {

class TableMeta {
 public:
  // Lays out the initial levels and heap for `config` and writes the first header.
  static void initialize(pool::Pool& pool, const TableConfig& config);

  explicit TableMeta(pool::Pool& pool) : pool_(pool) {}

  pool::Pool& pool() const { return pool_; }
  const format::PoolHeader& header() const { return pool_.header(); }
  uint32_t bottom_level() const { return header().gphash.bottom_level; }
  uint32_t top_level() const { return format::top_level(header()); }
  // The highest level that holds items: top_level(), or one more while a resize rehashes.
  uint32_t highest_level() const { return format::highest_level(header()); }
  std::byte* level(uint32_t l) const { return pool_.at<std::byte>(header().gphash.level_offset[l]); }
  std::byte* bucket(uint32_t l, uint64_t b) const { return level(l) + b * header().gphash.bucket_bytes; }
  uint64_t slot_capacity() const { return format::slot_capacity(header()); }

  bool has_heap() const { return !format::value_is_inline(header().gphash.value_width); }
  uint64_t heap_cells() const { return format::heap_cell_capacity(header()); }
  std::byte* cell(uint64_t ref) const {
    const format::PoolHeader& h = header();
    format::HeapGeometry g = format::heap_geometry(h);
    uint32_t c = g.chunk_of(ref);
    return pool_.at<std::byte>(h.gphash.heap_chunk_offset[c]) + (ref - g.chunk_begin(c)) * h.gphash.cell_size;
  }

  // Resize, step 1: allocates the new top level and persists kResizeRehashing. Throws kNoSpace
  // (nothing changed) when the pool cannot grow.
  void begin_resize(pool::Pool::Populate populate = pool::Pool::Populate::kNow);
  // Resize, last step: the old bottom level is empty; drop it and persist kResizeNone.
  void finish_resize();
  // Adds a heap chunk (doubling the heap). Throws kNoSpace when the pool cannot grow.
  void grow_heap(pool::Pool::Populate populate = pool::Pool::Populate::kNow);

  // Growth ahead (pool::Pool::reserve_ahead): once `items` reach half of what the next resize waits
  // for at `max_load_factor`, the file space of the level it adds is allocated on a thread of its
  // own while batches go on, and the same for the heap's next chunk once half its cells could be in
  // use; the growth then finds its pages there. Both engines call it after a batch of a table that
  // resizes by itself (the measurements: table_meta.cpp, the GPU engine's reserve_growth_ahead).
  void reserve_growth_ahead(uint64_t items, double max_load_factor);

  void mark_open_dirty();                   // persisted before the first write of a session
  void mark_clean(uint64_t item_count);     // persisted at a clean shutdown

 private:
  pool::Pool& pool_;
  uint32_t reserved_level_ = 0, reserved_chunk_ = 0;  // what reserve_growth_ahead() last reserved for
};

}  // namespace gphash::engine
