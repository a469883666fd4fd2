#include "kv/signature.h"

#include <xxhash.h>

namespace gphash::kv {

Signature xxh3_signature(std::string_view key) {
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  return {h.low64, h.high64};
}

}  // namespace gphash::kv
