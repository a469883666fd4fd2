// `gphash check` for an HMEH pool: the radix tree is a tree over the hash space (scan_radix_tree),
// and every slot of every segment it reaches obeys the format: no claim left over, each item's
// hash carries its segment's prefix, it sits where the placement rule allows a lookup to find it
// (a probe bucket of its home with no EMPTY slot in the probe buckets before it, or the stash
// after all of them and the stash buckets before it), its fingerprint matches (16-byte keys), no
// key is stored twice, heap references are inside the heap and unshared, and the count is right.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>

#include "format/hmeh/layout.h"
#include "gphash/error.h"
#include "indexes/hmeh/hmeh.h"
#include "indexes/hmeh/parallel.h"
#include "indexes/hmeh/radix_tree.h"

namespace gphash::hmeh {

namespace fh = format::hmeh;

namespace {

// The violation at the lowest (segment, slot) position wins, so the report does not depend on
// the number of threads.
class FirstViolation {
 public:
  void add(uint64_t position, std::string text) {
    std::lock_guard lock(mutex_);
    if (!text_.empty() && position >= position_) return;
    position_ = position;
    text_ = std::move(text);
  }
  const std::string& text() const { return text_; }

 private:
  std::mutex mutex_;
  uint64_t position_ = 0;
  std::string text_;
};

template <int KeyWidth>
engine::CheckReport check(const pool::Pool& pool, int threads, std::optional<uint64_t> expected_items) {
  using Slot = fh::SlotLayout<KeyWidth>;
  constexpr int kKeyWords = KeyWidth / 8;
  constexpr uint32_t kSlotWords = Slot::kSlotBytes / 8;
  constexpr uint32_t kSlotsPerBucket = fh::kBucketBytes / Slot::kSlotBytes;
  const format::HmehMeta& m = pool.header().hmeh;
  const Arenas arenas(pool);
  const uint32_t buckets = (1u << m.segment_bytes_log2) / fh::kBucketBytes;
  const fh::SegmentGeometry geo{buckets, buckets - m.stash_buckets, m.probe_buckets, m.stash_buckets, kSlotsPerBucket};
  const uint64_t seed = fh::key_seed(m.hash_seed);
  const bool has_heap = !format::value_is_inline(m.value_width);
  const uint64_t heap_cells = has_heap ? arenas.heap.capacity() : 0;

  engine::CheckReport report;
  RadixScan scan;
  try {
    scan = scan_radix_tree(arenas);
  } catch (const Error& e) {
    report.ok = false;
    report.violation = e.what();
    return report;
  }
  report.slots = scan.segments.size() * geo.slots();

  FirstViolation first;
  std::vector<uint64_t> cells(has_heap ? (heap_cells + 63) / 64 : 0);
  std::atomic<uint64_t> items{0}, claimed{0};
  parallel_for(threads, scan.segments.size(), 8, [&](int, uint64_t index) {
    const LiveSegment& seg = scan.segments[index];
    const std::byte* base = arenas.segments.address(seg.id);
    auto word = [&](uint32_t b, uint32_t s, uint32_t w) {
      return __atomic_load_n(reinterpret_cast<const uint64_t*>(base + uint64_t{b} * fh::kBucketBytes) +
                                 s * kSlotWords + w,
                             __ATOMIC_RELAXED);
    };
    auto has_empty = [&](uint32_t b) {
      for (uint32_t s = 0; s < kSlotsPerBucket; ++s)
        if (word(b, s, 0) == fh::kSlotEmpty) return true;
      return false;
    };
    auto where = [&](uint32_t b, uint32_t s) {
      return fmt::format("segment {} (prefix {:#x}/{}) bucket {} slot {}", seg.id, seg.prefix, seg.depth, b, s);
    };
    std::vector<std::array<uint64_t, kKeyWords>> keys;
    uint64_t local = 0;
    for (uint32_t b = 0; b < geo.buckets; ++b)
      for (uint32_t s = 0; s < kSlotsPerBucket; ++s) {
        const uint64_t position = (index * geo.buckets + b) * kSlotsPerBucket + s;
        const uint64_t state = word(b, s, 0);
        if (state == fh::kSlotClaimed) {
          claimed.fetch_add(1);
          first.add(position, where(b, s) + " is CLAIMED: an insert was cut short and recovery has not run");
          continue;
        }
        if (!fh::is_published(state)) continue;
        ++local;
        std::array<uint64_t, kKeyWords> key;
        if constexpr (KeyWidth == 8)
          key[0] = fh::decode_key_word(state);
        else
          for (int i = 0; i < kKeyWords; ++i) key[i] = word(b, s, Slot::kKeyWords[i]);
        keys.push_back(key);
        const uint64_t hash = fh::key_hash<kKeyWords>(key.data(), seed);
        if (fh::prefix_of(hash, seg.depth) != seg.prefix) {
          first.add(position, where(b, s) + " holds a key whose hash belongs to another segment");
          continue;
        }
        if constexpr (KeyWidth != 8)
          if (state != fh::fingerprint(hash)) {
            first.add(position, where(b, s) + " has a state word that is not its key's fingerprint");
            continue;
          }
        // Reachable by a lookup: every bucket the lookup scans before this one has no EMPTY slot.
        const uint32_t home = geo.home_bucket(hash);
        bool reachable = false;
        for (uint32_t i = 0; i < geo.probe; ++i) {
          if (geo.probe_bucket(home, i) == b) {
            reachable = true;
            break;
          }
          if (has_empty(geo.probe_bucket(home, i))) break;
        }
        if (!reachable && b >= geo.addressable) {
          reachable = true;
          for (uint32_t i = 0; i < geo.probe && reachable; ++i) reachable = !has_empty(geo.probe_bucket(home, i));
          for (uint32_t st = geo.addressable; st < b && reachable; ++st) reachable = !has_empty(st);
        }
        if (!reachable)
          first.add(position, where(b, s) + " holds a key a lookup cannot reach (an EMPTY slot stops it earlier, or "
                                            "the bucket is not among its probe buckets)");
        if (has_heap) {
          const uint64_t cell = word(b, s, Slot::kValueWord);
          if (cell >= heap_cells) {
            first.add(position, where(b, s) + fmt::format(" references cell {} outside the heap of {}", cell, heap_cells));
            continue;
          }
          const uint64_t bit = uint64_t{1} << (cell % 64);
          if (__atomic_fetch_or(&cells[cell / 64], bit, __ATOMIC_RELAXED) & bit)
            first.add(position, where(b, s) + fmt::format(" shares value cell {} with another slot", cell));
        }
      }
    std::sort(keys.begin(), keys.end());
    if (std::adjacent_find(keys.begin(), keys.end()) != keys.end())
      first.add(index * geo.slots(), fmt::format("segment {} stores a key twice", seg.id));
    items.fetch_add(local);
  });
  report.items = items.load();
  report.inserting = claimed.load();
  if (first.text().empty() && expected_items && *expected_items != report.items)
    first.add(0, fmt::format("the engine counts {} items, the slots hold {}", *expected_items, report.items));
  if (!first.text().empty()) {
    report.ok = false;
    report.violation = first.text();
  }
  return report;
}

}  // namespace

engine::CheckReport check_index(const pool::Pool& pool, int threads, std::optional<uint64_t> expected_items) {
  if (pool.header().hmeh.key_width == 8) return check<8>(pool, threads, expected_items);
  return check<16>(pool, threads, expected_items);
}

}  // namespace gphash::hmeh
