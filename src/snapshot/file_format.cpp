#include "snapshot/file_format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

namespace gphash::snapshot {

uint64_t checksum_of(const Superblock& s) { return XXH64(&s, offsetof(Superblock, checksum), 0); }
uint64_t checksum_of(const SegmentHeader& h) { return XXH64(&h, offsetof(SegmentHeader, checksum), 0); }
uint64_t index_checksum(const PageEntry* entries, uint64_t count) {
  return XXH64(entries, static_cast<size_t>(count * sizeof(PageEntry)), 0);
}
uint64_t page_hash(const void* page, uint64_t page_number) { return XXH3_64bits_withSeed(page, kPageBytes, page_number); }

bool page_is_zero(const void* page) {
  const auto* w = static_cast<const uint64_t*>(page);
  uint64_t any = 0;
  for (size_t i = 0; i < kPageBytes / 8; i += 8)
    any |= w[i] | w[i + 1] | w[i + 2] | w[i + 3] | w[i + 4] | w[i + 5] | w[i + 6] | w[i + 7];
  return any == 0;
}

}  // namespace gphash::snapshot
