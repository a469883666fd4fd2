// The shard of a key in a sharded table (OpenOptions::shards, src/table/shard_set.h), written once
// for host and device: the host routes batches in host memory with it, a kernel routes batches in
// GPU memory (src/engines/gpu/shard_route.cu). Every process must route a key to the same shard,
// so this rule and kShardSeed are part of the format (docs/FORMAT.md): changing either strands
// every item of an existing sharded table in the wrong pool.
//
// The shard is the high 32 bits of XXH64(key, kShardSeed) scaled to n (multiply-shift). Every hash
// a table computes inside a shard is XXH64 keyed by seeds derived from its pool's random
// hash_seed, so routing with this fixed, different seed is independent of the in-table bits.
#pragma once

#include <cstdint>

#include "format/hash.h"

namespace gphash::format {

inline constexpr uint64_t kShardSeed = 0x5348415244534554ull;  // "SHARDSET"

// `key` is 8-byte aligned (batches' keys are): the fixed-width forms equal XXH64 bit for bit
// (tests/hash_test) and are twice as fast.
GPHASH_HD uint32_t shard_of(const void* key, uint32_t key_width, uint32_t n) {
  const auto* words = static_cast<const uint64_t*>(key);
  uint64_t h;
  switch (key_width) {
    case 8: h = xxh64_words<1>(words, kShardSeed); break;
    case 16: h = xxh64_words<2>(words, kShardSeed); break;
    case 32: h = xxh64_words<4>(words, kShardSeed); break;
    default: h = xxh64(key, key_width, kShardSeed); break;
  }
  return static_cast<uint32_t>(((h >> 32) * n) >> 32);
}

}  // namespace gphash::format
