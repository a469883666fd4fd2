#include "indexes/hmeh/index_meta.h"

#include <fmt/format.h>

#include <cstring>
#include <random>
#include <vector>

#include "engines/common/crash_point.h"
#include "format/shape.h"
#include "gphash/error.h"

namespace gphash::hmeh {

namespace fh = format::hmeh;
using format::PoolHeader;

void Arena::load(uint64_t first, uint32_t chunks, const uint64_t* offsets, uint64_t unit_bytes,
                 const pool::Pool& pool) {
  geometry_ = {first, first ? static_cast<uint32_t>(__builtin_ctzll(first)) : 0};
  unit_bytes_ = unit_bytes;
  for (uint32_t c = 0; c < chunks; ++c) base_[c].store(pool.at<std::byte>(offsets[c]), std::memory_order_relaxed);
  chunks_.store(chunks, std::memory_order_release);
}

void Arena::add_chunk(std::byte* base) {
  const uint32_t c = chunks_.load(std::memory_order_relaxed);
  base_[c].store(base, std::memory_order_relaxed);
  chunks_.store(c + 1, std::memory_order_release);
}

namespace {

[[noreturn]] void invalid(const char* field, const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message, field);
}

uint64_t next_pow2(uint64_t x) { return x <= 1 ? 1 : uint64_t{1} << (64 - __builtin_clzll(x - 1)); }

void check_config(const TableConfig& c) {
  if (!fh::is_supported_key_width(c.key_width))
    invalid("key_width", fmt::format("key width {} is not supported by HMEH: use 8 or 16", c.key_width));
  if (c.value_width == 0 || c.value_width > format::kMaxValueWidth)
    invalid("value_width", fmt::format("value width {} is not supported: use 1..{}", c.value_width,
                                       format::kMaxValueWidth));
  if (c.value_checksums) invalid("value_checksums", "HMEH pools do not support value checksums; create without them");
  const uint32_t sb = c.hmeh.segment_bytes;
  if (sb == 0 || (sb & (sb - 1)) || sb < (1u << fh::kMinSegmentBytesLog2) || sb > (1u << fh::kMaxSegmentBytesLog2))
    invalid("segment_bytes", fmt::format("segment size {} is not a power of two in {}..{} bytes", sb,
                                         1u << fh::kMinSegmentBytesLog2, 1u << fh::kMaxSegmentBytesLog2));
  const uint32_t buckets = sb / fh::kBucketBytes;
  if (c.hmeh.stash_buckets > fh::kMaxStashBuckets)
    invalid("stash_buckets", fmt::format("stash of {} buckets: use 0..{}", c.hmeh.stash_buckets, fh::kMaxStashBuckets));
  if (c.hmeh.probe_buckets == 0 || c.hmeh.probe_buckets > fh::kMaxProbeBuckets ||
      c.hmeh.probe_buckets > buckets - c.hmeh.stash_buckets)
    invalid("probe_buckets", fmt::format("probing over {} buckets: use 1..{} (and at most the segment's addressable "
                                         "buckets)", c.hmeh.probe_buckets, fh::kMaxProbeBuckets));
  if (c.capacity == 0 || c.capacity > (uint64_t{1} << 36))
    invalid("capacity", fmt::format("capacity {} is not in 1..2^36", c.capacity));
}

// Writes the radix tree over the 2^depth initial segments (segment id = prefix) into the node
// arena, nodes numbered depth-first from the root (node 0). Returns the number of nodes.
uint64_t build_initial_tree(const Arena& nodes, uint32_t depth) {
  uint64_t next = 1;
  auto build = [&](auto&& self, uint64_t node, uint32_t level, uint64_t path) -> void {
    auto* entries = reinterpret_cast<uint64_t*>(nodes.address(node));
    const uint32_t bits = fh::kRadixBits * (level + 1);
    for (uint64_t e = 0; e < fh::kNodeEntries; ++e) {
      const uint64_t prefix = path << fh::kRadixBits | e;
      if (bits >= depth) {
        entries[e] = fh::segment_entry(prefix >> (bits - depth));
      } else {
        const uint64_t child = next++;
        entries[e] = fh::node_entry(child);
        self(self, child, level + 1, prefix);
      }
    }
  };
  build(build, 0, 0, 0);
  return next;
}

}  // namespace

void IndexMeta::initialize(pool::Pool& pool, const TableConfig& config) {
  check_config(config);
  PoolHeader h = pool.initial_header(format::kIndexHmeh);
  std::random_device rd;

  format::HmehMeta& m = h.hmeh;
  m.key_width = config.key_width;
  m.value_width = config.value_width;
  m.hash_function = format::kHashXxh64;
  m.segment_bytes_log2 = static_cast<uint8_t>(__builtin_ctz(config.hmeh.segment_bytes));
  m.probe_buckets = static_cast<uint8_t>(config.hmeh.probe_buckets);
  m.stash_buckets = static_cast<uint8_t>(config.hmeh.stash_buckets);
  m.hash_seed = config.hash_seed ? *config.hash_seed : (uint64_t{rd()} << 32 | rd());

  // Initial local depth: enough segments for `capacity` items at 70% load (a segment splits at
  // 75 to 90% with the default probing), and at least 2^kMinDepth so every depth has a place in
  // the radix tree (layout.h).
  const uint64_t slots_per_segment =
      uint64_t{config.hmeh.segment_bytes} / fh::kBucketBytes * fh::slots_per_bucket(config.key_width);
  uint32_t depth = fh::kMinDepth;
  while ((slots_per_segment << depth) * 7 / 10 < config.capacity) ++depth;
  // Room for the splits to come: the first chunk of each arena holds twice the initial need.
  m.segment_first_chunk = uint64_t{2} << depth;
  m.segment_chunk_count = 1;
  m.segment_chunk_offset[0] = pool.allocate_extent(h, m.segment_first_chunk << m.segment_bytes_log2);
  const uint64_t initial_nodes = ((uint64_t{1} << (fh::kRadixBits * ((depth + 1) / fh::kRadixBits))) - 1) / 3;
  m.node_first_chunk = std::max<uint64_t>(64, next_pow2(2 * initial_nodes + (uint64_t{1} << depth)));
  m.node_chunk_count = 1;
  m.node_chunk_offset[0] = pool.allocate_extent(h, m.node_first_chunk * fh::kNodeBytes);
  if (!format::value_is_inline(config.value_width)) {
    m.cell_size = format::cell_size_for(config.value_width, false);
    // Room for the capacity and a sixteenth more, as GPHash's heap (engines/common/table_meta.cpp):
    // with exactly the capacity (a power of two), a load to it grew the heap (threads keep cells at
    // hand), and so did the first update of a full table (its new cell comes before the old is freed).
    m.heap_first_chunk_cells = std::max<uint64_t>(64, next_pow2(config.capacity + config.capacity / 16));
    m.heap_chunk_count = 1;
    m.heap_chunk_offset[0] = pool.allocate_extent(h, m.heap_first_chunk_cells * m.cell_size);
  }
  // Fresh extents are zero-filled: the segments are empty. The pool is not published yet, so
  // the tree needs no ordering; write_initial_header persists everything.
  Arena nodes;
  nodes.load(m.node_first_chunk, 1, m.node_chunk_offset, fh::kNodeBytes, pool);
  const uint64_t built = build_initial_tree(nodes, depth);
  if (built > m.node_first_chunk) throw Error(ErrorCode::kCorruptTable, "initial radix tree larger than its arena");
  pool.persist(nodes.address(0), built * fh::kNodeBytes);
  pool.write_initial_header(h);
}

Arenas::Arenas(const pool::Pool& pool) {
  const format::HmehMeta& m = pool.header().hmeh;
  segments.load(m.segment_first_chunk, m.segment_chunk_count, m.segment_chunk_offset,
                uint64_t{1} << m.segment_bytes_log2, pool);
  nodes.load(m.node_first_chunk, m.node_chunk_count, m.node_chunk_offset, fh::kNodeBytes, pool);
  if (!format::value_is_inline(m.value_width))
    heap.load(m.heap_first_chunk_cells, m.heap_chunk_count, m.heap_chunk_offset, m.cell_size, pool);
}

IndexMeta::IndexMeta(pool::Pool& pool) : pool_(pool), arenas_(pool) {}

void IndexMeta::grow(uint32_t format::HmehMeta::*count, uint64_t format::HmehMeta::*first,
                     uint64_t (format::HmehMeta::*offsets)[fh::kMaxChunks], uint64_t unit_bytes, Arena& arena,
                     const char* what, pool::Pool::Populate populate) {
  PoolHeader h = header();
  format::HmehMeta& m = h.hmeh;
  const uint32_t c = m.*count;
  if (c >= fh::kMaxChunks) throw Error(ErrorCode::kNoSpace, fmt::format("the {} has its maximum number of chunks", what));
  const uint64_t units = (m.*first) << c;
  (m.*offsets)[c] = pool_.allocate_extent(h, units * unit_bytes, populate);
  m.*count = c + 1;
  GPHASH_CRASH_POINT("hmeh.grow.before_header");
  pool_.write_header(h);
  GPHASH_CRASH_POINT("hmeh.grow.after_header");
  arena.add_chunk(pool_.at<std::byte>((m.*offsets)[c]));
}

void IndexMeta::grow_segments() {
  // Segment ids are 32-bit in the flat directory.
  const Arena& segments = arenas_.segments;
  if (segments.capacity() + segments.chunk_units(segments.chunks()) > uint64_t{0xFFFFFFFF})
    throw Error(ErrorCode::kNoSpace, "the segment arena has its maximum of 2^32 - 1 segments");
  // A chunk is as large as the arena before it, and populating it at once held every splitting
  // thread up: the engine populates each segment as it takes it (HmehEngine::take_segment).
  grow(&format::HmehMeta::segment_chunk_count, &format::HmehMeta::segment_first_chunk,
       &format::HmehMeta::segment_chunk_offset, arenas_.segments.unit_bytes(), arenas_.segments, "segment arena",
       pool::Pool::Populate::kByCaller);
}

void IndexMeta::grow_nodes() {
  grow(&format::HmehMeta::node_chunk_count, &format::HmehMeta::node_first_chunk, &format::HmehMeta::node_chunk_offset,
       fh::kNodeBytes, arenas_.nodes, "radix node arena");
}

void IndexMeta::grow_heap() {
  grow(&format::HmehMeta::heap_chunk_count, &format::HmehMeta::heap_first_chunk_cells,
       &format::HmehMeta::heap_chunk_offset, meta().cell_size, arenas_.heap, "value heap");
}

void IndexMeta::mark_open_dirty() { pool_.mark_open_dirty(); }

void IndexMeta::mark_clean(uint64_t item_count) { pool_.mark_clean(item_count); }

}  // namespace gphash::hmeh
