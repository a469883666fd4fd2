// XXH64, written once for host and device. It must match libxxhash bit for bit (tests/hash_test
// checks it against XXH64() of libxxhash for every length 0..257 and the key widths). The
// fixed-width entry points are what the engines use; the general one serves tests and tools.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/hd.h"

namespace gphash::format {

namespace xxh64_detail {
inline constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
inline constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
inline constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
inline constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
inline constexpr uint64_t kP5 = 0x27D4EB2F165667C5ull;

GPHASH_HD uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
GPHASH_HD uint64_t round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = rotl(acc, 31);
  return acc * kP1;
}
GPHASH_HD uint64_t merge_round(uint64_t acc, uint64_t val) {
  acc ^= round(0, val);
  return acc * kP1 + kP4;
}
GPHASH_HD uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}
// Little-endian loads byte by byte: callers' buffers need no alignment here.
GPHASH_HD uint64_t load64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
GPHASH_HD uint32_t load32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
GPHASH_HD uint64_t mix_tail_word(uint64_t h, uint64_t word) {
  h ^= round(0, word);
  return rotl(h, 27) * kP1 + kP4;
}
}  // namespace xxh64_detail

// XXH64 of `len` bytes at `data`.
GPHASH_HD uint64_t xxh64(const void* data, size_t len, uint64_t seed) {
  using namespace xxh64_detail;
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* const end = p + len;
  uint64_t h;
  if (len >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    const unsigned char* const limit = end - 32;
    do {
      v1 = round(v1, load64(p));
      v2 = round(v2, load64(p + 8));
      v3 = round(v3, load64(p + 16));
      v4 = round(v4, load64(p + 24));
      p += 32;
    } while (p <= limit);
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge_round(h, v1);
    h = merge_round(h, v2);
    h = merge_round(h, v3);
    h = merge_round(h, v4);
  } else {
    h = seed + kP5;
  }
  h += static_cast<uint64_t>(len);
  for (; p + 8 <= end; p += 8) h = mix_tail_word(h, load64(p));
  if (p + 4 <= end) {
    h ^= static_cast<uint64_t>(load32(p)) * kP1;
    h = rotl(h, 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; ++p) {
    h ^= (*p) * kP5;
    h = rotl(h, 11) * kP1;
  }
  return avalanche(h);
}

// XXH64 of a key given as Words little-endian 64-bit words (Words = key width / 8). The key
// words are already loaded (as kernels read them), so this is the engines' fast path.
template <int Words>
GPHASH_HD uint64_t xxh64_words(const uint64_t* w, uint64_t seed) {
  using namespace xxh64_detail;
  static_assert(Words == 1 || Words == 2 || Words == 4, "key widths are 8, 16 or 32 bytes");
  uint64_t h;
  if constexpr (Words == 4) {
    uint64_t v1 = round(seed + kP1 + kP2, w[0]);
    uint64_t v2 = round(seed + kP2, w[1]);
    uint64_t v3 = round(seed, w[2]);
    uint64_t v4 = round(seed - kP1, w[3]);
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge_round(h, v1);
    h = merge_round(h, v2);
    h = merge_round(h, v3);
    h = merge_round(h, v4);
    h += 32;
  } else {
    h = seed + kP5 + Words * 8;
    for (int i = 0; i < Words; ++i) h = mix_tail_word(h, w[i]);
  }
  return avalanche(h);
}

// SplitMix64's finalizer: derives the per-function seeds from the pool's hash seed.
GPHASH_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace gphash::format
