// The on-pool format of a GPM log (docs/FORMAT.md section 13.2), shared by the device code that
// writes logs (include/gpm/transaction.h) and the CPU code that recovers them (src/gpm/recovery.cpp)
// and the CPU tests that forge them. Encoding only.
//
// A log is one extent: a 4 KiB header page (LogHeader, then the epoch on a line of its own), the
// state words (one per transaction slot), then the entries.
//
// A transaction slot is one GPU thread of a launch (slot = blockIdx.x * blockDim.x + threadIdx.x);
// a thread runs its transactions one after another, so a slot has at most one in flight.
//
// Entries are 4 words: {pool offset of the written word, value (undo: old, redo: new), tag, check}.
//   tag   = seq << 20 | index << 12 | owner   (index: position in the transaction, owner: thread
//           within the partition, conventional layout only)
//   check = XXH64 of {offset, value, tag, slot}: an entry whose words are not all of one write
//           (torn, stale, or never written) fails it.
//   seq   = epoch << 20 | k: the host bumps the log's epoch before each launch, k counts a thread's
//           transactions in the launch, so a slot's sequence numbers only grow.
// State word of a slot: seq << 20 | count << 2 | phase, phase kPhaseCommitted (redo: every entry is
// persisted, the in-place writes may not be) or kPhaseDone (the transaction and all before it are
// finished; entries with a larger seq belong to an unfinished one).
//
// Layouts:
//   HCL (hierarchical coalesced logging, the GPM paper's section 5.2): word w of entry i of slot s
//     is at entry word ((warp * E + i) * 4 + w) * 32 + lane, warp = s / 32, lane = s % 32, E =
//     entries_per_slot. The 32 lanes of a warp writing word w of their entry i store 256
//     consecutive bytes: two whole 128-byte lines. Every offset follows from the thread's block,
//     warp and lane: no counter, no atomic.
//   Conventional: one partition per partition_threads threads (a thread block), each an array of
//     partition_entries entries appended through a counter in GPU memory (an atomic per
//     transaction: the serialization HCL removes); one thread writes its entry's 4 words
//     contiguously. The counters restart at 0 each launch, so a partition holds one launch's
//     transactions; recovery scans all of it (stale entries carry older sequence numbers).
#pragma once

#include <cstdint>

#include "format/hash.h"
#include "format/hd.h"

namespace gphash::format::gpm {

enum LogLayout : uint32_t { kLayoutHcl = 1, kLayoutConventional = 2 };
enum LogMode : uint32_t { kModeUndo = 1, kModeRedo = 2 };

inline constexpr uint64_t kLogMagic = 0x01474F4C4D5047ull;  // "GPMLOG\1"
inline constexpr uint32_t kEntryWords = 4;
inline constexpr uint32_t kEntryBytes = kEntryWords * 8;
inline constexpr uint32_t kWarpLanes = 32;
inline constexpr uint32_t kMaxTxEntries = 255;       // index has 8 bits
inline constexpr uint32_t kMaxPartitionThreads = 4096;  // owner has 12 bits
inline constexpr uint64_t kMaxTxPerLaunch = 1ull << 20;  // k has 20 bits
inline constexpr uint64_t kMaxEpoch = (1ull << 24) - 1;   // seq has 44 bits
inline constexpr uint64_t kLogHeaderBytes = 4096;
inline constexpr uint64_t kEpochOffset = 128;  // in the header page, on a line of its own
inline constexpr uint64_t kEntrySeed = 0x47504D454E545259ull;  // "GPMENTRY"

inline constexpr uint32_t kPhaseCommitted = 1;
inline constexpr uint32_t kPhaseDone = 2;

struct LogHeader {
  uint64_t magic;
  uint32_t layout;  // LogLayout
  uint32_t mode;    // LogMode
  uint64_t slots;   // transaction slots (threads); HCL: a multiple of 32
  uint32_t entries_per_slot;   // HCL: entries each slot owns; conventional: most entries per transaction
  uint32_t partition_threads;  // conventional: threads per partition; HCL: 32
  uint64_t partition_entries;  // conventional: entries per partition; HCL: 0
  uint64_t state_offset;       // from the log's start
  uint64_t entries_offset;     // from the log's start, 128-byte aligned
  uint64_t bytes;              // the whole extent
  uint64_t reserved[7];
  uint64_t checksum;           // XXH64 (seed kLogMagic) of the 120 bytes above
};
static_assert(sizeof(LogHeader) == 128);

GPHASH_HD uint64_t log_header_checksum(const LogHeader& h) {
  return xxh64(&h, sizeof(LogHeader) - 8, kLogMagic);
}

GPHASH_HD uint64_t make_seq(uint64_t epoch, uint64_t k) { return epoch << 20 | k; }
GPHASH_HD uint64_t make_tag(uint64_t seq, uint32_t index, uint32_t owner) {
  return seq << 20 | uint64_t{index} << 12 | owner;
}
GPHASH_HD uint64_t tag_seq(uint64_t tag) { return tag >> 20; }
GPHASH_HD uint32_t tag_index(uint64_t tag) { return static_cast<uint32_t>(tag >> 12) & 0xFF; }
GPHASH_HD uint32_t tag_owner(uint64_t tag) { return static_cast<uint32_t>(tag) & 0xFFF; }
GPHASH_HD uint64_t make_state(uint64_t seq, uint32_t count, uint32_t phase) {
  return seq << 20 | uint64_t{count} << 2 | phase;
}
GPHASH_HD uint64_t state_seq(uint64_t s) { return s >> 20; }
GPHASH_HD uint32_t state_count(uint64_t s) { return static_cast<uint32_t>(s >> 2) & 0x3FFFF; }
GPHASH_HD uint32_t state_phase(uint64_t s) { return static_cast<uint32_t>(s) & 3; }

GPHASH_HD uint64_t entry_check(uint64_t offset, uint64_t value, uint64_t tag, uint64_t slot) {
  const uint64_t words[4] = {offset, value, tag, slot};
  return xxh64_words<4>(words, kEntrySeed);
}

// Index (in 8-byte words, from the entries' start) of word w of a slot's entry i (HCL), or of
// word w of a partition's entry e (conventional).
GPHASH_HD uint64_t hcl_word(uint64_t slot, uint32_t entries_per_slot, uint32_t i, uint32_t w) {
  const uint64_t warp = slot / kWarpLanes, lane = slot % kWarpLanes;
  return ((warp * entries_per_slot + i) * kEntryWords + w) * kWarpLanes + lane;
}
GPHASH_HD uint64_t conventional_word(uint64_t partition, uint64_t partition_entries, uint64_t e, uint32_t w) {
  return (partition * partition_entries + e) * kEntryWords + w;
}

// Entries a log holds in all.
GPHASH_HD uint64_t log_entry_count(const LogHeader& h) {
  return h.layout == kLayoutHcl ? h.slots * h.entries_per_slot : (h.slots / h.partition_threads) * h.partition_entries;
}

}  // namespace gphash::format::gpm
