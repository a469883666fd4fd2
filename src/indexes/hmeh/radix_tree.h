// The radix-tree directory in the pool (layout in format/hmeh/layout.h): reading it whole at open
// (directory recovery) and finding where a segment hangs, for a split to replace it.
//
// The tree is never repaired: a split writes its new segments and node, persists them, and
// publishes them with one 8-byte store, so after any crash the tree is either the old or the new
// one, and whatever a cut-short split wrote is unreachable, hence free. Reading it is the whole
// of directory recovery; it is also how the checker and the crash tests enumerate segments.
#pragma once

#include <cstdint>
#include <vector>

#include "indexes/hmeh/index_meta.h"

namespace gphash::hmeh {

struct LiveSegment {
  uint64_t id;
  uint32_t depth;   // local depth
  uint64_t prefix;  // the top `depth` bits of the hashes it holds
};

struct RadixScan {
  std::vector<LiveSegment> segments;  // in prefix order
  std::vector<uint64_t> nodes;        // live node ids, the root first
  uint32_t max_depth = 0;             // the flat directory's global depth
};

// Walks the tree from the root, checking that it is a tree (each node and segment reached once,
// entries well formed and inside their arenas, depths in range, a segment's entries aligned).
// Throws Error(kCorruptTable) naming the node and entry otherwise.
RadixScan scan_radix_tree(const Arenas& arenas);

// Where the entries of a segment (depth, prefix) live: `node`, its `first` entry and how many
// (1 or 2), and the entry of the parent that points to `node` (none for the root).
struct SegmentPlace {
  uint64_t node = 0;
  uint32_t first = 0;
  uint32_t count = 1;
  uint64_t* parent_entry = nullptr;
};
// Follows the prefix from the root. The caller excludes concurrent changes of the tree.
SegmentPlace locate_segment(const Arenas& arenas, uint32_t depth, uint64_t prefix);

// Entry index at `level` (2 bits) of a prefix of `depth` bits.
inline uint32_t entry_index(uint64_t prefix, uint32_t depth, uint32_t level) {
  const uint32_t bits = format::hmeh::kRadixBits * (level + 1);
  const uint64_t top = bits <= depth ? prefix >> (depth - bits) : prefix << (bits - depth);
  return static_cast<uint32_t>(top & (format::hmeh::kNodeEntries - 1));
}

}  // namespace gphash::hmeh
