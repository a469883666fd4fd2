// Table configuration: levels (L), hash functions (H) and slots per bucket (S). A key has L*H
// candidate buckets and L*H*S candidate slots; L*H*S = 32 lets one warp read them all at once.
#pragma once

#include <cstdint>

#include "format/hd.h"
#include "gphash/config.h"

namespace gphash::format {

inline constexpr int kWarpSlots = 32;
// Bucket indices come from the top bits of a 64-bit hash and fingerprints from the low 32 bits,
// so a level may have at most 2^32 buckets.
inline constexpr uint32_t kMaxLevel = 32;

using gphash::TableShape;

inline constexpr TableShape kDefaultShape{2, 2, 8};
// Shapes the engines are compiled for. Adding one: append it here and to dispatch.h.
inline constexpr TableShape kSupportedShapes[] = {{2, 2, 8}, {4, 2, 4}, {1, 4, 8}};

constexpr bool is_supported(TableShape s) {
  for (TableShape t : kSupportedShapes)
    if (t == s) return true;
  return false;
}

// The compile-time form the engines are instantiated with.
template <int L, int H, int S>
struct Shape {
  static_assert(L * H * S == kWarpSlots, "a shape needs L*H*S = 32: one warp lane per candidate slot");
  static_assert(L >= 1 && H >= 1 && S >= 1, "levels, hashes and slots are at least 1");
  static constexpr int kLevels = L;
  static constexpr int kHashes = H;
  static constexpr int kSlots = S;
  static constexpr int kCandidateBuckets = L * H;
  static constexpr TableShape value() { return {L, H, S}; }
};

inline constexpr uint32_t kKeyWidths[] = {8, 16, 32};
constexpr bool is_supported_key_width(uint32_t w) { return w == 8 || w == 16 || w == 32; }

// Values of at most this many bytes live in the slot's value word; larger ones in the heap.
inline constexpr uint32_t kMaxInlineValue = 8;
inline constexpr uint32_t kMaxValueWidth = 1u << 16;
constexpr bool value_is_inline(uint32_t value_width) { return value_width <= kMaxInlineValue; }
// Heap cells are rounded to 16 bytes so that 16-byte vector copies stay aligned. With value
// checksums a cell ends with its 8-byte checksum (cell.h).
constexpr uint32_t cell_size_for(uint32_t value_width, bool value_checksums) {
  return value_is_inline(value_width) ? 0 : (value_width + (value_checksums ? 8 : 0) + 15) / 16 * 16;
}

}  // namespace gphash::format
