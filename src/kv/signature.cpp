#include "kv/signature.h"

#include <xxhash.h>

namespace gphash::kv {

Signature xxh3_signature(std::string_view key) {
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  return {h.low64, h.high64};
}

uint32_t partition_of(std::string_view key, uint32_t partitions) {
  if (partitions <= 1) return 0;
  constexpr uint64_t kPartitionSeed = 0x70a27b1e5eedull;
  const uint64_t h = XXH3_64bits_withSeed(key.data(), key.size(), kPartitionSeed);
  return static_cast<uint32_t>(h % partitions);
}

}  // namespace gphash::kv
