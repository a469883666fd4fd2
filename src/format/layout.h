// Byte layout of a bucket, a level and the value heap.
#pragma once

#include <cstdint>

#include "format/hd.h"

namespace gphash::format {

// Byte offsets of slot s's words in a bucket are offset + s * stride:
//   16- and 32-byte keys: S state (fingerprint) words, then S keys, then S value words, so a
//     warp's reads of one kind of word coalesce;
//   8-byte keys: S (key word, value word) pairs, since the key word is the state and a lookup
//     that already knows its slot (from the GPU's tag mirror) reads key and value in one access.
struct BucketLayout {
  uint32_t key_width;
  uint32_t slots;

  GPHASH_HD bool key_is_state() const { return key_width == 8; }
  GPHASH_HD uint32_t state_offset(uint32_t s) const { return key_is_state() ? 16 * s : 8 * s; }
  GPHASH_HD uint32_t key_offset(uint32_t s) const { return key_is_state() ? 16 * s : 8 * slots + key_width * s; }
  GPHASH_HD uint32_t value_offset(uint32_t s) const {
    return key_is_state() ? 16 * s + 8 : 8 * slots + key_width * slots + 8 * s;
  }
  GPHASH_HD uint32_t bytes() const { return key_is_state() ? 16 * slots : (16 + key_width) * slots; }
};

template <int KeyWidth, int Slots>
struct StaticBucketLayout {
  static_assert(KeyWidth == 8 || KeyWidth == 16 || KeyWidth == 32, "key widths are 8, 16 or 32 bytes");
  static constexpr bool kKeyIsState = KeyWidth == 8;
  static constexpr uint32_t kKeyWords = KeyWidth / 8;
  static constexpr uint32_t kStateOffset = 0;
  static constexpr uint32_t kStateStride = kKeyIsState ? 16 : 8;
  static constexpr uint32_t kKeyOffset = kKeyIsState ? 0 : 8 * Slots;
  static constexpr uint32_t kKeyStride = kKeyIsState ? 16 : KeyWidth;
  static constexpr uint32_t kValueOffset = kKeyIsState ? 8 : 8 * Slots + KeyWidth * Slots;
  static constexpr uint32_t kValueStride = kKeyIsState ? 16 : 8;
  static constexpr uint32_t kBytes = kKeyIsState ? 16 * Slots : (16 + KeyWidth) * Slots;
};

GPHASH_HD uint64_t level_buckets(uint32_t level) { return uint64_t{1} << level; }

// The value heap is a list of chunks; chunk c holds first_chunk_cells << c cells, so a heap that
// doubles never moves a cell. A value word holds a cell's global index.
struct HeapGeometry {
  uint64_t first_chunk_cells;  // a power of two
  uint32_t first_chunk_log2;

  GPHASH_HD uint64_t chunk_cells(uint32_t chunk) const { return first_chunk_cells << chunk; }
  // Global index of the first cell of a chunk: first * (2^c - 1).
  GPHASH_HD uint64_t chunk_begin(uint32_t chunk) const {
    return first_chunk_cells * ((uint64_t{1} << chunk) - 1);
  }
  GPHASH_HD uint64_t cells_in_chunks(uint32_t chunk_count) const { return chunk_begin(chunk_count); }
  GPHASH_HD uint32_t chunk_of(uint64_t cell) const {
    uint64_t q = (cell >> first_chunk_log2) + 1;  // in [2^c, 2^(c+1))
    return 63 - static_cast<uint32_t>(clz64(q));
  }

 private:
  GPHASH_HD static int clz64(uint64_t x) {
#if defined(__CUDA_ARCH__)
    return __clzll(static_cast<long long>(x));
#else
    return __builtin_clzll(x);
#endif
  }
};

}  // namespace gphash::format
