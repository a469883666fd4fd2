#include "format/hmeh/meta.h"

#include <fmt/format.h>

#include "format/header.h"
#include "format/hmeh/layout.h"
#include "format/layout.h"
#include "format/shape.h"
#include "gphash/error.h"

namespace gphash::format {

namespace {

[[noreturn]] void corrupt(const std::string& field, const std::string& why) {
  throw Error(ErrorCode::kCorruptHeader, fmt::format("corrupt pool header: {} {}", field, why), field);
}

bool is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

HeapGeometry geometry(uint64_t first) {
  return {first, first ? static_cast<uint32_t>(__builtin_ctzll(first)) : 0};
}

}  // namespace

void validate_hmeh_section(const PoolHeader& ph, std::vector<std::pair<uint64_t, uint64_t>>& extents) {
  const HmehMeta& h = ph.hmeh;
  if (!hmeh::is_supported_key_width(h.key_width)) corrupt("key_width", fmt::format("is {}, not 8 or 16", h.key_width));
  if (h.value_width == 0 || h.value_width > kMaxValueWidth)
    corrupt("value_width", fmt::format("is {}, not in 1..{}", h.value_width, kMaxValueWidth));
  if (h.hash_function != kHashXxh64) corrupt("hash_function", fmt::format("is {}, expected 1 (XXH64)", h.hash_function));
  if (h.segment_bytes_log2 < hmeh::kMinSegmentBytesLog2 || h.segment_bytes_log2 > hmeh::kMaxSegmentBytesLog2)
    corrupt("segment_bytes_log2", fmt::format("is {}, not in {}..{}", h.segment_bytes_log2, hmeh::kMinSegmentBytesLog2,
                                              hmeh::kMaxSegmentBytesLog2));
  const uint32_t buckets = (1u << h.segment_bytes_log2) / hmeh::kBucketBytes;
  if (h.stash_buckets > hmeh::kMaxStashBuckets)
    corrupt("stash_buckets", fmt::format("is {}, more than {}", h.stash_buckets, hmeh::kMaxStashBuckets));
  if (h.probe_buckets == 0 || h.probe_buckets > hmeh::kMaxProbeBuckets ||
      h.probe_buckets > buckets - h.stash_buckets)
    corrupt("probe_buckets", fmt::format("is {}, not in 1..{} (and at most the segment's {} addressable buckets)",
                                         h.probe_buckets, hmeh::kMaxProbeBuckets, buckets - h.stash_buckets));
  if (has_value_checksums(ph)) corrupt("incompat_features", "has value checksums, which HMEH pools do not support");

  const uint64_t align = uint64_t{1} << ph.extent_align_log2;
  auto check_arena = [&](const char* count_field, const char* first_field, const char* offset_field, uint32_t count,
                         uint64_t first, const uint64_t* offsets, uint64_t unit_bytes, uint32_t min_count) {
    if (count < min_count || count > hmeh::kMaxChunks)
      corrupt(count_field, fmt::format("is {}, not in {}..{}", count, min_count, hmeh::kMaxChunks));
    if (!is_pow2(first) || first > (uint64_t{1} << 40))
      corrupt(first_field, fmt::format("is {}, not a power of two up to 2^40", first));
    const HeapGeometry g = geometry(first);
    for (uint32_t c = 0; c < hmeh::kMaxChunks; ++c) {
      const std::string field = fmt::format("{}[{}]", offset_field, c);
      if (c >= count) {
        if (offsets[c] != 0) corrupt(field, fmt::format("is set past {}", count_field));
        continue;
      }
      uint64_t bytes = 0;
      if (c >= 64 - g.first_chunk_log2 || __builtin_mul_overflow(g.chunk_cells(c), unit_bytes, &bytes))
        corrupt(field, "describes a chunk larger than the address space");
      const uint64_t offset = offsets[c];
      if (offset < kReservedPrefixBytes || offset % align)
        corrupt(field, fmt::format("offset {} is not an aligned extent past the header", offset));
      if (bytes > ph.pool_used || offset > ph.pool_used - bytes)
        corrupt(field, fmt::format("extent [{}, {}) ends beyond pool_used {}", offset, offset + bytes, ph.pool_used));
      extents.emplace_back(offset, offset + bytes);
    }
  };
  // At least the root node and the 2^kMinDepth segments of a fresh table.
  check_arena("segment_chunk_count", "segment_first_chunk", "segment_chunk_offset", h.segment_chunk_count,
              h.segment_first_chunk, h.segment_chunk_offset, uint64_t{1} << h.segment_bytes_log2, 1);
  if (h.segment_first_chunk < (1u << hmeh::kMinDepth))
    corrupt("segment_first_chunk", fmt::format("is {}, less than the {} segments of a fresh table",
                                               h.segment_first_chunk, 1u << hmeh::kMinDepth));
  check_arena("node_chunk_count", "node_first_chunk", "node_chunk_offset", h.node_chunk_count, h.node_first_chunk,
              h.node_chunk_offset, hmeh::kNodeBytes, 1);

  if (value_is_inline(h.value_width)) {
    if (h.cell_size != 0) corrupt("cell_size", "is set although values are inline");
    if (h.heap_chunk_count != 0) corrupt("heap_chunk_count", "is set although values are inline");
    for (uint32_t c = 0; c < hmeh::kMaxChunks; ++c)
      if (h.heap_chunk_offset[c] != 0) corrupt(fmt::format("heap_chunk_offset[{}]", c), "is set past heap_chunk_count");
  } else {
    const uint32_t want = cell_size_for(h.value_width, false);
    if (h.cell_size != want)
      corrupt("cell_size", fmt::format("is {}, value_width {} gives {}", h.cell_size, h.value_width, want));
    check_arena("heap_chunk_count", "heap_first_chunk_cells", "heap_chunk_offset", h.heap_chunk_count,
                h.heap_first_chunk_cells, h.heap_chunk_offset, h.cell_size, 1);
  }

  const uint64_t segments = geometry(h.segment_first_chunk).cells_in_chunks(h.segment_chunk_count);
  const uint64_t slots_per_segment = uint64_t{buckets} * hmeh::slots_per_bucket(h.key_width);
  uint64_t slots = 0;
  if (__builtin_mul_overflow(segments, slots_per_segment, &slots) || ph.item_count > slots)
    corrupt("item_count", fmt::format("is {}, more than the arena's {} segments can hold", ph.item_count, segments));
}

std::string describe_hmeh_section(const PoolHeader& ph) {
  const HmehMeta& h = ph.hmeh;
  std::string out;
  auto line = [&](std::string_view name, const std::string& value) { out += fmt::format("{:<22} {}\n", name, value); };
  line("key_width", std::to_string(h.key_width));
  line("value_width", std::to_string(h.value_width));
  line("hash", fmt::format("XXH64 seed {:#018x}", h.hash_seed));
  line("segment_bytes", std::to_string(uint64_t{1} << h.segment_bytes_log2));
  line("probing", fmt::format("{} buckets, stash of {}", h.probe_buckets, h.stash_buckets));
  line("segment_arena", fmt::format("{} segments in {} chunks",
                                    geometry(h.segment_first_chunk).cells_in_chunks(h.segment_chunk_count),
                                    h.segment_chunk_count));
  line("node_arena", fmt::format("{} radix nodes in {} chunks",
                                 geometry(h.node_first_chunk).cells_in_chunks(h.node_chunk_count), h.node_chunk_count));
  line("clean_shutdown", ph.clean_shutdown ? "yes" : "no");
  line("item_count", std::to_string(ph.item_count));
  if (!value_is_inline(h.value_width)) {
    line("cell_size", std::to_string(h.cell_size));
    line("heap_chunks", std::to_string(h.heap_chunk_count));
    line("heap_cells", std::to_string(geometry(h.heap_first_chunk_cells).cells_in_chunks(h.heap_chunk_count)));
  }
  return out;
}

}  // namespace gphash::format
