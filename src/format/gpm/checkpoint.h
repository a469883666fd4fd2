// The on-pool format of a GPM checkpoint group (docs/FORMAT.md section 13.3). Encoding only.
//
// A group is one extent: a 4 KiB header page (GroupHeader: the elements' sizes, fixed when the
// group is created; then two CheckpointRecords on lines of their own), then two copies of the
// elements, each element 128-byte aligned inside a copy (the paper aligns checkpoints to 128
// bytes for PCIe and NVM bandwidth).
//
// Checkpoint n (n = 1, 2, ...) writes the copy the valid record does not name, persists it, then
// writes record n % 2 = {n, copy, check} and persists it. Restore takes the record with the larger
// sequence among those whose check holds: a crash before the record is persisted leaves the
// previous checkpoint valid and its copy untouched; a torn record fails its check.
#pragma once

#include <cstdint>

#include "format/hash.h"
#include "format/hd.h"

namespace gphash::format::gpm {

inline constexpr uint64_t kGroupMagic = 0x01505043445047ull;  // "GPDCPP\1"
inline constexpr uint32_t kMaxGroupElements = 32;
inline constexpr uint64_t kElementAlign = 128;
inline constexpr uint64_t kGroupHeaderBytes = 4096;
inline constexpr uint64_t kRecordOffset[2] = {1024, 1088};  // in the header page
inline constexpr uint64_t kRecordSeed = 0x4750445245434F52ull;

struct GroupHeader {
  uint64_t magic;
  uint32_t element_count;
  uint32_t reserved0;
  uint64_t copy_bytes;      // one copy of every element, with alignment
  uint64_t copy_offset[2];  // from the group's start
  uint64_t element_bytes[kMaxGroupElements];
  uint64_t reserved[3];
  uint64_t checksum;  // XXH64 (seed kGroupMagic) of the bytes above
};
static_assert(sizeof(GroupHeader) == 328);

struct CheckpointRecord {
  uint64_t sequence;  // 1, 2, ...; 0: no checkpoint
  uint32_t copy;      // 0 or 1
  uint32_t reserved;
  uint64_t copy_bytes;
  uint64_t check;     // XXH64 of the three words above
};
static_assert(sizeof(CheckpointRecord) == 32);

GPHASH_HD uint64_t group_header_checksum(const GroupHeader& h) { return xxh64(&h, sizeof(GroupHeader) - 8, kGroupMagic); }
GPHASH_HD uint64_t record_check(const CheckpointRecord& r) {
  const uint64_t words[4] = {r.sequence, (uint64_t{r.reserved} << 32) | r.copy, r.copy_bytes, kRecordSeed};
  return xxh64_words<4>(words, kRecordSeed);
}
GPHASH_HD uint64_t align_element(uint64_t bytes) { return (bytes + kElementAlign - 1) / kElementAlign * kElementAlign; }
// Offset of element e inside a copy.
GPHASH_HD uint64_t element_offset(const GroupHeader& h, uint32_t e) {
  uint64_t off = 0;
  for (uint32_t i = 0; i < e; ++i) off += align_element(h.element_bytes[i]);
  return off;
}

}  // namespace gphash::format::gpm
