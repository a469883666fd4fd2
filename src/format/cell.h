// Value checksums (pool feature kFeatureValueChecksums): the last 8 bytes of every heap cell hold
// a checksum of the cell's value, seeded with the first hash of the key that owns it. It detects
// damaged value bytes, and also a slot whose value word (or a heap chunk's offset) points at the
// wrong cell, since another key's value does not match this key's seed.
//
// The checksum is a sum of independently mixed 8-byte words, so the lanes of a warp can each take
// some words and add their terms (the GPU engine does); the host computes it in one loop.
// Values are read as little-endian words, the last one zero-padded.
#pragma once

#include <cstdint>
#include <cstring>

#include "format/hash.h"
#include "format/hd.h"

namespace gphash::format {

inline constexpr uint64_t kChecksumWordStep = 0x9E3779B97F4A7C15ull;

// Term of word `index` (0-based) of a value whose owner's first hash is `key_hash0`.
GPHASH_HD uint64_t value_checksum_term(uint64_t word, uint32_t index, uint64_t key_hash0) {
  return mix64(word ^ (key_hash0 + kChecksumWordStep * (uint64_t{index} + 1)));
}
GPHASH_HD uint64_t value_checksum_finish(uint64_t term_sum, uint32_t value_width) {
  return mix64(term_sum ^ (uint64_t{value_width} << 32));
}
GPHASH_HD uint64_t value_checksum(const void* value, uint32_t value_width, uint64_t key_hash0) {
  const auto* p = static_cast<const unsigned char*>(value);
  uint64_t sum = 0;
  for (uint32_t w = 0; w * 8 < value_width; ++w) {
    uint64_t word = 0;
    const uint32_t n = value_width - w * 8 < 8 ? value_width - w * 8 : 8;
    for (uint32_t b = 0; b < n; ++b) word |= uint64_t{p[w * 8 + b]} << (8 * b);
    sum += value_checksum_term(word, w, key_hash0);
  }
  return value_checksum_finish(sum, value_width);
}
// Where a cell's checksum lives.
GPHASH_HD uint32_t cell_checksum_offset(uint32_t cell_size) { return cell_size - 8; }

}  // namespace gphash::format
