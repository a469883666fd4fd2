#include "format/header.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "format/hash.h"
#include "gphash/error.h"

namespace gphash::format {

uint64_t header_checksum(const PoolHeader& h) {
  return xxh64(&h, offsetof(PoolHeader, checksum), 0);
}

void seal(PoolHeader& h) { h.checksum = header_checksum(h); }

HeapGeometry heap_geometry(const PoolHeader& h) {
  uint64_t first = h.gphash.heap_first_chunk_cells;
  uint32_t log2 = first ? static_cast<uint32_t>(__builtin_ctzll(first)) : 0;
  return {first, log2};
}

uint64_t heap_cell_capacity(const PoolHeader& h) {
  return heap_geometry(h).cells_in_chunks(h.gphash.heap_chunk_count);
}

uint64_t slot_capacity(const PoolHeader& h) {
  uint64_t buckets = 0;
  for (uint32_t l = h.gphash.bottom_level; l <= top_level(h); ++l) buckets += level_buckets(l);
  return buckets * h.gphash.slots;
}

namespace {

[[noreturn]] void corrupt(const char* field, const std::string& why) {
  throw Error(ErrorCode::kCorruptHeader, fmt::format("corrupt pool header: {} {}", field, why), field);
}

bool is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

}  // namespace

namespace {

using Extents = std::vector<std::pair<uint64_t, uint64_t>>;  // [begin, end)

// The GPHash section: configuration, levels and heap chunks. Adds its extents to `extents`.
void validate_gphash_section(const PoolHeader& ph, Extents& extents) {
  const GphashMeta& h = ph.gphash;
  if (!is_supported_key_width(h.key_width)) corrupt("key_width", fmt::format("is {}, not 8, 16 or 32", h.key_width));
  if (h.value_width == 0 || h.value_width > kMaxValueWidth)
    corrupt("value_width", fmt::format("is {}, not in 1..{}", h.value_width, kMaxValueWidth));
  if (!is_supported(TableShape{h.levels, h.hashes, h.slots}))
    corrupt("levels/hashes/slots", fmt::format("{}L-{}H-{}S is not a supported shape", h.levels, h.hashes, h.slots));
  if (h.hash_function != kHashXxh64) corrupt("hash_function", fmt::format("is {}, expected 1 (XXH64)", h.hash_function));
  if (h.bucket_bytes != bucket_layout(ph).bytes())
    corrupt("bucket_bytes", fmt::format("is {}, the layout gives {}", h.bucket_bytes, bucket_layout(ph).bytes()));
  if (h.resize_state != kResizeNone && h.resize_state != kResizeRehashing)
    corrupt("resize_state", fmt::format("is {}, not 0 or 1", h.resize_state));
  uint32_t highest = top_level(ph) + (h.resize_state == kResizeRehashing ? 1 : 0);
  if (h.bottom_level > kMaxLevel || highest > kMaxLevel)
    corrupt("bottom_level", fmt::format("is {}: levels would exceed {}", h.bottom_level, kMaxLevel));

  const uint64_t align = uint64_t{1} << ph.extent_align_log2;
  auto check_extent = [&](const char* field, uint64_t offset, uint64_t bytes) {
    if (offset < kReservedPrefixBytes || offset % align)
      corrupt(field, fmt::format("offset {} is not an aligned extent past the header", offset));
    if (bytes > ph.pool_used || offset > ph.pool_used - bytes)
      corrupt(field, fmt::format("extent [{}, {}) ends beyond pool_used {}", offset, offset + bytes, ph.pool_used));
    extents.emplace_back(offset, offset + bytes);
  };
  for (uint32_t l = 0; l <= kMaxLevel; ++l) {
    bool active = l >= h.bottom_level && l <= highest;
    std::string field = fmt::format("level_offset[{}]", l);
    if (!active && h.level_offset[l] != 0) corrupt(field.c_str(), "is set for a level outside the table");
    if (active && h.level_offset[l] == 0) corrupt(field.c_str(), "is missing for an active level");
    if (active) check_extent(field.c_str(), h.level_offset[l], level_bytes(ph, l));
  }

  if (value_is_inline(h.value_width)) {
    if (h.cell_size != 0) corrupt("cell_size", "is set although values are inline");
    if (h.heap_chunk_count != 0) corrupt("heap_chunk_count", "is set although values are inline");
    if (has_value_checksums(ph)) corrupt("incompat_features", "has value checksums although values are inline");
  } else {
    const uint32_t want = cell_size_for(h.value_width, has_value_checksums(ph));
    if (h.cell_size != want)
      corrupt("cell_size", fmt::format("is {}, value_width {} gives {}", h.cell_size, h.value_width, want));
    if (h.heap_chunk_count > kMaxHeapChunks)
      corrupt("heap_chunk_count", fmt::format("is {}, more than {}", h.heap_chunk_count, kMaxHeapChunks));
    if (!is_pow2(h.heap_first_chunk_cells) || h.heap_first_chunk_cells > (uint64_t{1} << 40))
      corrupt("heap_first_chunk_cells", fmt::format("is {}, not a power of two up to 2^40", h.heap_first_chunk_cells));
    HeapGeometry g = heap_geometry(ph);
    for (uint32_t c = 0; c < h.heap_chunk_count; ++c) {
      std::string field = fmt::format("heap_chunk_offset[{}]", c);
      uint64_t bytes = 0;
      if (__builtin_mul_overflow(g.chunk_cells(c), uint64_t{h.cell_size}, &bytes) || c >= 64 - g.first_chunk_log2)
        corrupt(field.c_str(), "describes a chunk larger than the address space");
      check_extent(field.c_str(), h.heap_chunk_offset[c], bytes);
    }
  }
  for (uint32_t c = h.heap_chunk_count; c < kMaxHeapChunks; ++c)
    if (h.heap_chunk_offset[c] != 0) corrupt(fmt::format("heap_chunk_offset[{}]", c).c_str(), "is set past heap_chunk_count");
  if (ph.item_count > slot_capacity(ph))
    corrupt("item_count", fmt::format("is {}, more than the {} slots", ph.item_count, slot_capacity(ph)));
}

}  // namespace

void validate_header(const PoolHeader& h, uint64_t file_size) {
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    throw Error(ErrorCode::kNotAPool, "not a gphash pool (wrong magic bytes)", "magic");
  if (h.byte_order != kByteOrderMark)
    corrupt("byte_order", fmt::format("is {:#x}, expected {:#x} (a pool is little-endian)", h.byte_order,
                                      kByteOrderMark));
  if (h.version_major != kFormatMajor) {
    if (h.version_major == 1)
      throw Error(ErrorCode::kUnsupportedVersion,
                  fmt::format("pool format version 1.{} is older than this build's {}.x: convert the pool once with "
                              "`gphash convert POOL` (it rewrites the header only, the data stays in place)",
                              h.version_minor, kFormatMajor),
                  "version_major");
    throw Error(ErrorCode::kUnsupportedVersion,
                fmt::format("unsupported pool format version {}.{}: this build reads version {}.x", h.version_major,
                            h.version_minor, kFormatMajor),
                "version_major");
  }
  if (header_checksum(h) != h.checksum)
    throw Error(ErrorCode::kChecksumMismatch,
                fmt::format("pool header checksum mismatch: stored {:#018x}, computed {:#018x}", h.checksum,
                            header_checksum(h)),
                "checksum");
  if (h.incompat_features & ~kKnownIncompatFeatures)
    throw Error(ErrorCode::kUnsupportedFeature,
                fmt::format("pool uses incompatible features {:#x} this build does not know; upgrade gphash",
                            h.incompat_features & ~kKnownIncompatFeatures),
                "incompat_features");

  if (h.clean_shutdown > 1) corrupt("clean_shutdown", fmt::format("is {}, not 0 or 1", h.clean_shutdown));
  if (h.extent_align_log2 < 12 || h.extent_align_log2 > 30)
    corrupt("extent_align_log2", fmt::format("is {}, not in 12..30", h.extent_align_log2));
  if (h.pool_used > h.pool_size)
    corrupt("pool_used", fmt::format("is {}, beyond pool_size {}", h.pool_used, h.pool_size));
  if (h.pool_used < kReservedPrefixBytes)
    corrupt("pool_used", fmt::format("is {}, below the {}-byte prefix", h.pool_used, kReservedPrefixBytes));

  Extents extents;
  std::string extent_fields;  // the fields that name the extents
  switch (h.index_kind) {
    case kIndexGphash:
      validate_gphash_section(h, extents);
      extent_fields = "level_offset/heap_chunk_offset";
      break;
    case kIndexHmeh:
      validate_hmeh_section(h, extents);
      extent_fields = "segment_chunk_offset/node_chunk_offset/heap_chunk_offset";
      break;
    case kIndexGpm:
      validate_gpm_section(h, extents);
      extent_fields = "objects[].offset";
      break;
    default:
      corrupt("index_kind", fmt::format("is {}, not a known index (1 = gphash, 2 = hmeh, 3 = gpm)", h.index_kind));
  }
  if (h.attachment_offset != 0 || h.attachment_bytes != 0) {
    const uint64_t align = uint64_t{1} << h.extent_align_log2;
    if (h.attachment_offset < kReservedPrefixBytes || h.attachment_offset % align || h.attachment_bytes == 0)
      corrupt("attachment_offset", fmt::format("[{}, +{}) is not an aligned extent past the header", h.attachment_offset,
                                               h.attachment_bytes));
    if (h.attachment_bytes > h.pool_used || h.attachment_offset > h.pool_used - h.attachment_bytes)
      corrupt("attachment_bytes", fmt::format("extent [{}, +{}) ends beyond pool_used {}", h.attachment_offset,
                                              h.attachment_bytes, h.pool_used));
    extents.emplace_back(h.attachment_offset, h.attachment_offset + h.attachment_bytes);
    extent_fields += "/attachment_offset";
  }
  std::sort(extents.begin(), extents.end());
  for (size_t i = 1; i < extents.size(); ++i)
    if (extents[i].first < extents[i - 1].second)
      corrupt(extent_fields.c_str(), fmt::format("extents overlap at offset {}", extents[i].first));

  if (h.pool_size > file_size)
    throw Error(ErrorCode::kTruncated,
                fmt::format("pool is truncated: the file has {} bytes, its header says {}", file_size, h.pool_size),
                "pool_size");
}

std::string describe(const PoolHeader& h) {
  std::string out;
  auto line = [&](std::string_view name, const std::string& value) { out += fmt::format("{:<22} {}\n", name, value); };
  line("format", fmt::format("{}.{}", h.version_major, h.version_minor));
  line("index", h.index_kind == kIndexGphash ? "gphash"
                : h.index_kind == kIndexHmeh ? "hmeh"
                : h.index_kind == kIndexGpm  ? "gpm"
                                             : fmt::format("kind {}", h.index_kind));
  line("features", has_value_checksums(h) ? "value checksums" : "none");
  line("generation", std::to_string(h.generation));
  line("pool_size", std::to_string(h.pool_size));
  line("pool_used", std::to_string(h.pool_used));
  if (h.attachment_bytes) line("attachment", fmt::format("{} bytes at {}", h.attachment_bytes, h.attachment_offset));
  if (h.index_kind == kIndexHmeh) return out + describe_hmeh_section(h);
  if (h.index_kind == kIndexGpm) return out + describe_gpm_section(h);
  const GphashMeta& g = h.gphash;
  line("key_width", std::to_string(g.key_width));
  line("value_width", std::to_string(g.value_width));
  line("shape", fmt::format("{}L-{}H-{}S", g.levels, g.hashes, g.slots));
  line("hash", fmt::format("XXH64 seed {:#018x}", g.hash_seed));
  line("bucket_bytes", std::to_string(g.bucket_bytes));
  line("levels", fmt::format("{}..{}", g.bottom_level, top_level(h)));
  line("resize_state", g.resize_state == kResizeNone ? "none" : "rehashing");
  line("clean_shutdown", h.clean_shutdown ? "yes" : "no");
  line("item_count", std::to_string(h.item_count));
  line("slot_capacity", std::to_string(slot_capacity(h)));
  if (!value_is_inline(g.value_width)) {
    line("cell_size", std::to_string(g.cell_size));
    line("heap_chunks", std::to_string(g.heap_chunk_count));
    line("heap_cells", std::to_string(heap_cell_capacity(h)));
  }
  return out;
}

}  // namespace gphash::format

namespace gphash {

// The configuration's text forms live with the format (the engines and the facade both use them).
std::string to_string(TableShape s) { return fmt::format("{}L-{}H-{}S", s.levels, s.hashes, s.slots); }

TableShape parse_shape(const std::string& text) {
  // Strictly "<L>L-<H>H-<S>S" with decimal numbers up to 255 (no sign, no wrap-around).
  auto fail = [&] {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cannot read shape '{}': write it like 2L-2H-8S (levels, hashes, slots)", text), "shape");
  };
  unsigned part[3];
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int i = 0; i < 3; ++i) {
    const auto [next, err] = std::from_chars(p, end, part[i]);
    if (err != std::errc() || next == p || part[i] > 255 || next == end || *next != "LHS"[i]) fail();
    p = next + 1;
    if (i < 2 && (p == end || *p++ != '-')) fail();
  }
  if (p != end) fail();
  return {static_cast<uint8_t>(part[0]), static_cast<uint8_t>(part[1]), static_cast<uint8_t>(part[2])};
}

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kNotAPool: return "not a pool";
    case ErrorCode::kUnsupportedVersion: return "unsupported version";
    case ErrorCode::kUnsupportedFeature: return "unsupported feature";
    case ErrorCode::kChecksumMismatch: return "checksum mismatch";
    case ErrorCode::kTruncated: return "truncated";
    case ErrorCode::kCorruptHeader: return "corrupt header";
    case ErrorCode::kCorruptTable: return "corrupt table";
    case ErrorCode::kKeyWidthMismatch: return "key width mismatch";
    case ErrorCode::kValueWidthMismatch: return "value width mismatch";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kPoolExists: return "pool exists";
    case ErrorCode::kPoolInUse: return "pool in use";
    case ErrorCode::kNoSpace: return "no space";
    case ErrorCode::kIo: return "i/o error";
    case ErrorCode::kNotMappable: return "not mappable";
    case ErrorCode::kNoGpu: return "no gpu";
    case ErrorCode::kReadOnly: return "read only";
    case ErrorCode::kCorruptFile: return "corrupt file";
    case ErrorCode::kCuda: return "cuda error";
    case ErrorCode::kNeedsRecovery: return "needs recovery";
    case ErrorCode::kTableFailed: return "table failed";
    case ErrorCode::kShardMismatch: return "shard mismatch";
  }
  return "unknown";
}

}  // namespace gphash
