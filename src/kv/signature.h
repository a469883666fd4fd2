// The signature of a variable-length key: the fixed-width key of the index table.
//
// The index (a gphash Table with 16-byte keys and 8-byte values) maps a key's signature to the
// location of the first item with that signature in the item store. 128 bits make a collision of
// two live keys astronomically unlikely (about n^2 / 2^129), but the store never relies on that:
// items with one signature form a chain, and every hit is confirmed by comparing the full key.
// Tests pass a deliberately weak signature function to force collisions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace gphash::kv {

struct Signature {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const Signature&, const Signature&) = default;
};
static_assert(sizeof(Signature) == 16, "the index table's key width is 16 bytes");

struct SignatureHash {
  size_t operator()(const Signature& s) const noexcept { return static_cast<size_t>(s.lo ^ (s.hi * 0x9E3779B97F4A7C15ull)); }
};

using SignatureFn = Signature (*)(std::string_view key);

// XXH3-128 of the key: the production signature.
Signature xxh3_signature(std::string_view key);

// Which of `partitions` independent stores holds the key (the server's --partitions): a hash
// seeded apart from the signature's, so each store's keys spread over its index like any keys.
uint32_t partition_of(std::string_view key, uint32_t partitions);

}  // namespace gphash::kv
