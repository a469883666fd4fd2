#include "indexes/hmeh/radix_tree.h"

#include <fmt/format.h>

#include "gphash/error.h"

namespace gphash::hmeh {

namespace fh = format::hmeh;

namespace {

[[noreturn]] void corrupt(uint64_t node, uint32_t entry, const std::string& why) {
  throw Error(ErrorCode::kCorruptTable,
              fmt::format("corrupt radix directory: node {} entry {} {} (the directory is damaged and cannot be "
                          "rebuilt from the segments: restore the pool from a copy)",
                          node, entry, why));
}

uint64_t load_entry(const Arenas& arenas, uint64_t node, uint32_t e) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(arenas.nodes.address(node)) + e, __ATOMIC_ACQUIRE);
}

class Walker {
 public:
  explicit Walker(const Arenas& arenas)
      : arenas_(arenas),
        node_capacity_(arenas.nodes.capacity()),
        segment_capacity_(arenas.segments.capacity()),
        max_depth_(fh::max_depth(segment_capacity_)),
        node_seen_((node_capacity_ + 63) / 64, 0),
        segment_seen_((segment_capacity_ + 63) / 64, 0) {}

  RadixScan run() {
    mark(node_seen_, 0);
    visit(0, 0, 0);
    return std::move(scan_);
  }

 private:
  static bool mark(std::vector<uint64_t>& bits, uint64_t id) {
    const uint64_t bit = uint64_t{1} << (id % 64);
    const bool was = bits[id / 64] & bit;
    bits[id / 64] |= bit;
    return !was;
  }

  // `path` holds the 2 * level prefix bits leading to `node`.
  void visit(uint64_t node, uint32_t level, uint64_t path) {
    scan_.nodes.push_back(node);
    uint64_t entries[fh::kNodeEntries];
    for (uint32_t e = 0; e < fh::kNodeEntries; ++e) entries[e] = load_entry(arenas_, node, e);
    for (uint32_t e = 0; e < fh::kNodeEntries;) {
      const uint64_t entry = entries[e];
      const uint64_t id = fh::entry_id(entry);
      const uint64_t prefix = path << fh::kRadixBits | e;
      switch (fh::entry_kind(entry)) {
        case fh::EntryKind::kNode: {
          if (id >= node_capacity_) corrupt(node, e, fmt::format("names node {} beyond the arena's {}", id, node_capacity_));
          if (fh::kRadixBits * (level + 2) > max_depth_ + 1)
            corrupt(node, e, fmt::format("names a child node below the deepest level ({} bits for {} segments)",
                                         max_depth_, segment_capacity_));
          if (!mark(node_seen_, id)) corrupt(node, e, fmt::format("names node {}, which is reached twice", id));
          visit(id, level + 1, prefix);
          ++e;
          break;
        }
        case fh::EntryKind::kSegment: {
          // A segment fills one entry, or two aligned ones (one bit less of depth).
          const uint32_t filled = e % 2 == 0 && e + 1 < fh::kNodeEntries && entries[e + 1] == entry ? 2 : 1;
          const uint32_t depth = fh::kRadixBits * (level + 1) - (filled == 2 ? 1 : 0);
          if (depth < fh::kMinDepth || depth > max_depth_)
            corrupt(node, e, fmt::format("places a segment at depth {}, outside {}..{}", depth, fh::kMinDepth,
                                         max_depth_));
          if (id >= segment_capacity_)
            corrupt(node, e, fmt::format("names segment {} beyond the arena's {}", id, segment_capacity_));
          if (!mark(segment_seen_, id)) corrupt(node, e, fmt::format("names segment {}, which is reached twice", id));
          scan_.segments.push_back({id, depth, filled == 2 ? prefix >> 1 : prefix});
          scan_.max_depth = std::max(scan_.max_depth, depth);
          e += filled;
          break;
        }
        default: corrupt(node, e, fmt::format("holds {:#x}, neither a node nor a segment", entry));
      }
    }
  }

  const Arenas& arenas_;
  uint64_t node_capacity_, segment_capacity_;
  uint32_t max_depth_;
  std::vector<uint64_t> node_seen_, segment_seen_;
  RadixScan scan_;
};

}  // namespace

RadixScan scan_radix_tree(const Arenas& arenas) { return Walker(arenas).run(); }

SegmentPlace locate_segment(const Arenas& arenas, uint32_t depth, uint64_t prefix) {
  SegmentPlace place;
  const uint32_t node_level = fh::node_level_of(depth);
  place.count = fh::entries_filled(depth);
  for (uint32_t level = 0; level < node_level; ++level) {
    const uint32_t e = entry_index(prefix, depth, level);
    const uint64_t entry = load_entry(arenas, place.node, e);
    if (fh::entry_kind(entry) != fh::EntryKind::kNode)
      corrupt(place.node, e, fmt::format("should lead to the segment of prefix {:#x} at depth {}", prefix, depth));
    place.parent_entry = reinterpret_cast<uint64_t*>(arenas.nodes.address(place.node)) + e;
    place.node = fh::entry_id(entry);
  }
  place.first = entry_index(prefix, depth, node_level);
  return place;
}

}  // namespace gphash::hmeh
