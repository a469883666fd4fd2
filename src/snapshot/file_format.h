// The snapshot file: the one source of truth for its format. docs/FORMAT.md section 12 documents
// every byte; the static_asserts below pin the offsets it states. All integers little-endian.
//
//   offset 0      superblock, copy 0 (4 KiB)
//   offset 4096   superblock, copy 1 (4 KiB)
//   offset 8192   segment 0 (the base), then segment 1, 2, ... each starting 4 KiB-aligned
//
// A segment is a consistent capture of pool pages: segment 0 holds every nonzero page of the pool,
// each later segment (a delta) the pages that changed since the segment before it. Restoring
// applies the segments in order to an all-zero file of the last segment's pool size.
//
//   segment:  header (4 KiB) | data pages (4 KiB each) | index (16 bytes per page, padded to 4 KiB)
//
// The superblock is the commit record: a segment exists once a superblock naming it is durable.
// Appending writes the segment past the committed end, syncs it, then writes the superblock copy
// that holds the older generation and syncs that; a crash at any point leaves the other copy, and
// with it the previous chain, intact. A new chain (the first snapshot, or one compacting a long
// chain) is written to a temporary file that is renamed over the old one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gphash::snapshot {

inline constexpr uint64_t kPageShift = 12;
inline constexpr uint64_t kPageBytes = uint64_t{1} << kPageShift;
inline constexpr uint64_t kSuperblockOffset[2] = {0, 4096};
inline constexpr uint64_t kFirstSegmentOffset = 8192;

inline constexpr unsigned char kSnapshotMagic[8] = {0x89, 'G', 'P', 'S', 'N', 'A', 'P', '\n'};
inline constexpr unsigned char kSegmentMagic[8] = {'G', 'P', 'S', 'N', 'S', 'E', 'G', '\n'};
inline constexpr uint32_t kByteOrderMark = 0x01020304;
inline constexpr uint16_t kVersionMajor = 1;
inline constexpr uint16_t kVersionMinor = 0;

struct Superblock {
  unsigned char magic[8];       // kSnapshotMagic
  uint32_t byte_order;          // kByteOrderMark
  uint16_t version_major;       // another major version is refused
  uint16_t version_minor;       // readers accept any minor version of their major
  uint64_t generation;          // +1 per commit; the valid copy with the higher one is current
  unsigned char chain_id[16];   // random per chain (per file written whole): deltas name it
  unsigned char pool_uuid[16];  // the uuid of the pool the snapshots are of (its header's)
  uint32_t page_shift;          // 12: pages of 4 KiB
  uint32_t reserved0;
  uint64_t segment_count;       // committed segments
  uint64_t committed_end;       // file offset where the last committed segment ends
  uint64_t last_segment_offset;
  uint64_t last_segment_checksum;  // the `checksum` field of that segment's header
  // Copied from the last segment, for a reader that wants them without walking the chain.
  uint64_t pool_bytes;
  uint64_t captured_unix_ns;
  uint64_t pool_writes;
  uint64_t base_bytes;          // bytes of segment 0 (the compaction policy compares the chain with it)
  unsigned char reserved[4088 - 128];
  uint64_t checksum;            // XXH64 (seed 0) of bytes [0, 4088)
};
static_assert(sizeof(Superblock) == 4096);
static_assert(offsetof(Superblock, generation) == 16);
static_assert(offsetof(Superblock, chain_id) == 24);
static_assert(offsetof(Superblock, pool_uuid) == 40);
static_assert(offsetof(Superblock, page_shift) == 56);
static_assert(offsetof(Superblock, segment_count) == 64);
static_assert(offsetof(Superblock, committed_end) == 72);
static_assert(offsetof(Superblock, last_segment_offset) == 80);
static_assert(offsetof(Superblock, last_segment_checksum) == 88);
static_assert(offsetof(Superblock, pool_bytes) == 96);
static_assert(offsetof(Superblock, captured_unix_ns) == 104);
static_assert(offsetof(Superblock, pool_writes) == 112);
static_assert(offsetof(Superblock, base_bytes) == 120);
static_assert(offsetof(Superblock, checksum) == 4088);

enum SegmentKind : uint32_t {
  kSegmentBase = 1,   // pages of the whole pool (segment 0 only)
  kSegmentDelta = 2,  // pages changed since the previous segment
};

struct SegmentHeader {
  unsigned char magic[8];      // kSegmentMagic
  uint64_t sequence;           // 0 for the base, +1 per segment
  uint32_t kind;               // SegmentKind
  uint32_t reserved0;
  uint64_t entry_count;        // index entries
  uint64_t data_pages;         // pages stored after this header, in index order
  uint64_t pool_bytes;         // the pool's size at the capture; no entry names a page past it
  uint64_t captured_unix_ns;   // when the capture was taken (writers held off)
  uint64_t pool_writes;        // the pool's write counter at the capture
  uint64_t segment_bytes;      // header + data + index (padded): the next segment starts here + this
  uint64_t previous_checksum;  // `checksum` of the previous segment's header; 0 for the base
  unsigned char chain_id[16];  // the superblock's
  uint64_t index_checksum;     // XXH64 (seed 0) of the entry_count * 16 index bytes
  unsigned char reserved[4088 - 104];
  uint64_t checksum;           // XXH64 (seed 0) of bytes [0, 4088)
};
static_assert(sizeof(SegmentHeader) == 4096);
static_assert(offsetof(SegmentHeader, sequence) == 8);
static_assert(offsetof(SegmentHeader, kind) == 16);
static_assert(offsetof(SegmentHeader, entry_count) == 24);
static_assert(offsetof(SegmentHeader, data_pages) == 32);
static_assert(offsetof(SegmentHeader, pool_bytes) == 40);
static_assert(offsetof(SegmentHeader, captured_unix_ns) == 48);
static_assert(offsetof(SegmentHeader, pool_writes) == 56);
static_assert(offsetof(SegmentHeader, segment_bytes) == 64);
static_assert(offsetof(SegmentHeader, previous_checksum) == 72);
static_assert(offsetof(SegmentHeader, chain_id) == 80);
static_assert(offsetof(SegmentHeader, index_checksum) == 96);
static_assert(offsetof(SegmentHeader, checksum) == 4088);

// One page of a segment. Entries with data come in the order of the data pages; a page appears at
// most once per segment.
struct PageEntry {
  uint64_t page;  // page number (pool offset / 4096) in bits 0..51; bit 63 set: the page is all
                  // zero and has no data page; bits 52..62 are zero
  uint64_t hash;  // XXH3-64 of the page's 4096 bytes with the page number as seed; 0 for a zero page
};
static_assert(sizeof(PageEntry) == 16);
inline constexpr uint64_t kZeroPageFlag = uint64_t{1} << 63;
inline constexpr uint64_t kPageNumberMask = (uint64_t{1} << 52) - 1;

inline constexpr uint64_t round_to_page(uint64_t bytes) { return (bytes + kPageBytes - 1) & ~(kPageBytes - 1); }
inline constexpr uint64_t segment_bytes_for(uint64_t data_pages, uint64_t entries) {
  return kPageBytes + data_pages * kPageBytes + round_to_page(entries * sizeof(PageEntry));
}

uint64_t checksum_of(const Superblock& s);
uint64_t checksum_of(const SegmentHeader& h);
uint64_t index_checksum(const PageEntry* entries, uint64_t count);
uint64_t page_hash(const void* page, uint64_t page_number);
bool page_is_zero(const void* page);

}  // namespace gphash::snapshot
