// Host-side owner of an HMEH pool's metadata: creating the initial index (segments, radix tree,
// heap), resolving segment, node and cell ids to addresses, and the header transitions that grow
// an arena. Every header change of an HMEH pool goes through here; callers serialise them.
//
// Addresses are resolved from chunk bases cached here, never from the header, so worker threads
// can resolve ids while another thread grows an arena: a chunk's base is published (release)
// before any id inside it is handed out, and never changes afterwards.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "format/header.h"
#include "format/hmeh/layout.h"
#include "format/layout.h"
#include "gphash/config.h"
#include "pool/pool.h"

namespace gphash::hmeh {

// One growable arena: chunk c holds first << c units of unit_bytes each.
class Arena {
 public:
  void load(uint64_t first, uint32_t chunks, const uint64_t* offsets, uint64_t unit_bytes, const pool::Pool& pool);
  uint64_t capacity() const { return geometry_.cells_in_chunks(chunks_.load(std::memory_order_acquire)); }
  uint32_t chunks() const { return chunks_.load(std::memory_order_acquire); }
  uint64_t chunk_units(uint32_t c) const { return geometry_.chunk_cells(c); }
  uint64_t chunk_begin(uint32_t c) const { return geometry_.chunk_begin(c); }
  uint64_t unit_bytes() const { return unit_bytes_; }
  uint32_t chunk_of(uint64_t id) const { return geometry_.chunk_of(id); }
  std::byte* address(uint64_t id) const {
    const uint32_t c = geometry_.chunk_of(id);
    return base_[c].load(std::memory_order_relaxed) + (id - geometry_.chunk_begin(c)) * unit_bytes_;
  }
  // Publishes chunk `c` (the next one) at `base`.
  void add_chunk(std::byte* base);

 private:
  format::HeapGeometry geometry_{};
  uint64_t unit_bytes_ = 0;
  std::atomic<uint32_t> chunks_{0};
  std::array<std::atomic<std::byte*>, format::hmeh::kMaxChunks> base_{};
};

// The three arenas of a pool, resolved from its current header.
struct Arenas {
  explicit Arenas(const pool::Pool& pool);
  Arena segments, nodes, heap;
};

class IndexMeta {
 public:
  // Checks `config` (typed kInvalidArgument errors naming the field), lays out the initial index
  // in the fresh `pool` (2^d segments, d >= 2 sized for config.capacity, and the radix tree over
  // them) and writes the first header.
  static void initialize(pool::Pool& pool, const TableConfig& config);

  explicit IndexMeta(pool::Pool& pool);

  pool::Pool& pool() const { return pool_; }
  // The current header. Changes only through the methods below (callers serialise them).
  const format::HmehMeta& meta() const { return pool_.header().hmeh; }
  const format::PoolHeader& header() const { return pool_.header(); }

  const Arenas& arenas() const { return arenas_; }
  const Arena& segments() const { return arenas_.segments; }
  const Arena& nodes() const { return arenas_.nodes; }
  const Arena& heap() const { return arenas_.heap; }
  bool has_heap() const { return !format::value_is_inline(meta().value_width); }

  // Add one chunk to an arena (doubling it) and persist the header. Throw kNoSpace (nothing
  // changed) when the pool cannot grow or the arena has its maximum number of chunks.
  void grow_segments();
  void grow_nodes();
  void grow_heap();

  void mark_open_dirty();                // persisted before the first write of a session
  void mark_clean(uint64_t item_count);  // persisted at a clean shutdown

 private:
  // Allocates the extent of chunk `count` of an arena, records it in `h`, and writes the header.
  void grow(uint32_t format::HmehMeta::*count, uint64_t format::HmehMeta::*first,
            uint64_t (format::HmehMeta::*offsets)[format::hmeh::kMaxChunks], uint64_t unit_bytes, Arena& arena,
            const char* what, pool::Pool::Populate populate = pool::Pool::Populate::kNow);

  pool::Pool& pool_;
  Arenas arenas_;
};

}  // namespace gphash::hmeh
